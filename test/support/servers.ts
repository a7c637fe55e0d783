/**
 * Real local servers for tests that need a far end: an HTTP server that
 * records every request it gets, and a bare TCP listener that counts
 * connections. Both listen on 127.0.0.1, port 0, and close after the test.
 */
import http from 'node:http'
import net from 'node:net'
import { onCleanup } from './temp.ts'

export interface RecordedRequest { method: string, url: string, headers: http.IncomingHttpHeaders, body: string }

export type Handler = (request: RecordedRequest, response: http.ServerResponse) => void

export interface HttpServer {
  port: number
  /** `http://127.0.0.1:PORT` */
  base: string
  requests: RecordedRequest[]
}

/** An HTTP server on 127.0.0.1 that records requests (with their bodies) before `handler` answers. */
export async function startHttpServer (handler: Handler): Promise<HttpServer> {
  const requests: RecordedRequest[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') }
      requests.push(recorded)
      handler(recorded, res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(() => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const { port } = server.address() as net.AddressInfo
  return { port, base: `http://127.0.0.1:${port}`, requests }
}

export interface TcpServer { port: number, connections: () => number }

/** A TCP listener on 127.0.0.1 that counts (and closes) the connections it accepts. */
export async function startTcpServer (): Promise<TcpServer> {
  let connections = 0
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    connections++
    sockets.add(socket)
    socket.on('error', () => {})
    socket.end('hello\n')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(() => new Promise((resolve) => { for (const socket of sockets) socket.destroy(); server.close(() => resolve()) }))
  return { port: (server.address() as net.AddressInfo).port, connections: () => connections }
}
