// Cancel a running statement as libpq does: a CancelRequest carrying the connection's backend key,
// sent on a connection of its own. Not `select pg_cancel_backend(pid)`: behind a pooler in
// transaction mode the pid a client is told is the pooler's, not a server process's, so that
// cancels nothing, or another session's statement. A pooler forwards a CancelRequest to the server
// connection its client is on. It needs no login either, so it works with the pool full.
import { connect, type Socket } from 'node:net';

/** The protocol's CancelRequest code (1234 << 16 | 5678). */
const CANCEL_REQUEST_CODE = 80877102;

export interface CancelKey {
  /** As the client connected: a host name or address, or a Unix socket directory. */
  host: string;
  port: number;
  processID: number;
  secretKey: number;
}

/** The key of a connected node-postgres client, or null while it has none (not yet connected). */
export function cancelKeyOf(client: unknown): CancelKey | null {
  const c = client as { host?: unknown; port?: unknown; processID?: unknown; secretKey?: unknown };
  if (typeof c.host !== 'string' || typeof c.port !== 'number' || typeof c.processID !== 'number' || typeof c.secretKey !== 'number') return null;
  return { host: c.host, port: c.port, processID: c.processID, secretKey: c.secretKey };
}

/**
 * Send the CancelRequest and wait until the server (or pooler) closes the connection, which it
 * does once it has taken the request; a cancel is a request, so whether the statement stopped is
 * for the caller to see. Unencrypted, as libpq sends it before PostgreSQL 17. As libpq, this side
 * closes only after the other has: PgBouncer 1.18, given the request and the close together,
 * forwarded the cancel and then died on an assertion (every client of it disconnected).
 */
export function sendCancelRequest(key: CancelKey, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const packet = Buffer.alloc(16);
    packet.writeInt32BE(16, 0);
    packet.writeInt32BE(CANCEL_REQUEST_CODE, 4);
    packet.writeInt32BE(key.processID, 8);
    packet.writeInt32BE(key.secretKey, 12);
    const socket: Socket = key.host.startsWith('/')
      ? connect(`${key.host}/.s.PGSQL.${key.port}`)
      : connect(key.port, key.host);
    socket.once('connect', () => socket.write(packet));
    // A server that does not close (gone silent) does not keep the socket.
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no answer to the cancel request within ${timeoutMs} ms`)));
    socket.once('error', reject);
    socket.once('close', (hadError) => {
      if (!hadError) resolve();
    });
    // The server answers nothing and closes; reading to that end brings 'end', and our side
    // closes then (allowHalfOpen is off), so 'close' comes.
    socket.resume();
  });
}
