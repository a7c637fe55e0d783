#!/usr/bin/env node
// weather: current weather for a place, from wttr.in. With SHELLCLAW_STUB=1
// (Toolport's `tools.stub: true`) it answers a fixed, offline reading, as
// shellclaw's stub mode asks; without it, it needs the internet and says so
// on stderr (exit 1) when it cannot reach it.
const DESCRIPTION = {
  name: 'get_weather',
  description: 'Get current weather for a location',
  parameters: {
    type: 'object',
    properties: {
      location: { type: 'string', description: 'City name or coordinates' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'], description: 'Temperature unit' },
    },
    required: ['location'],
  },
}

const TIMEOUT_MS = 5000

function fail (message) {
  process.stderr.write(`get_weather: ${message}\n`)
  process.exit(1)
}

function stubReading (location, unit) {
  return { location, temperature: unit === 'fahrenheit' ? 59 : 15, unit, condition: 'Sunny', stub: true }
}

async function liveReading (location, unit) {
  const url = `https://wttr.in/${encodeURIComponent(location)}?format=j1`
  let body
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) })
    if (!response.ok) fail(`wttr.in answered HTTP ${response.status}`)
    body = await response.json()
  } catch (error) {
    fail(`cannot reach wttr.in (this tool needs the internet; set SHELLCLAW_STUB=1 for a canned answer): ${error.cause?.code ?? error.message}`)
  }
  const current = body?.current_condition?.[0]
  if (!current) fail('wttr.in sent no current conditions')
  const temperature = Number(unit === 'fahrenheit' ? current.temp_F : current.temp_C)
  return { location, temperature, unit, condition: current.weatherDesc?.[0]?.value ?? 'unknown', stub: false }
}

if (process.argv[2] === '--describe') {
  process.stdout.write(`${JSON.stringify(DESCRIPTION, null, 2)}\n`)
  process.exit(0)
}

let args
try {
  args = JSON.parse(process.argv[2] ?? '{}')
} catch {
  fail('the arguments ($1) are not JSON')
}
const location = args?.location
if (typeof location !== 'string' || location.trim() === '') fail('location is required')
const unit = args.unit === 'fahrenheit' ? 'fahrenheit' : 'celsius'
const reading = process.env.SHELLCLAW_STUB === '1' ? stubReading(location, unit) : await liveReading(location, unit)
process.stdout.write(`${JSON.stringify(reading)}\n`)
