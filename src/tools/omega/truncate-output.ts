/** omega's `truncate_output`: the first `max` characters and a notice naming the total. */
export function truncateOutput (text: string, max: number, totalChars = text.length): string {
  if (text.length <= max && totalChars <= max) return text
  const kept = text.slice(0, max)
  return `${kept}\n... (output truncated: ${totalChars} total chars, showing first ${kept.length})`
}
