// rea panel: serve the admin panel and HTTP API standalone. Credentials come from
// REA_ADMIN_TOKEN (or --token-env); --no-auth is for a loopback address only.
import { createServer } from 'node:http';
import { Command } from 'commander';
import { checkOrigins, createAdminHandler } from '../admin/handler.js';
import { isLoopbackHost, resolveAuth, type AdminAuth } from '../admin/auth.js';
import type { AdminBus } from '../admin/route.js';
import { OptionsError } from '../core/errors.js';
import { adminBus } from './admin-bus.js';
import { addConnectionFlags, checkPort, type ConnectionFlags } from './settings.js';
import { flagError } from './usage-error.js';

export interface PanelFlags extends ConnectionFlags, AdminServeFlags {
  port: string;
}

export function panelCommand(): Command {
  return addConnectionFlags(new Command('panel').description('serve the admin panel and HTTP API (overview, events, jobs, endpoints, /metrics, /healthz)'))
    .option('--port <n>', 'port to listen on', '8787')
    .option('--host <address>', 'address to bind', '127.0.0.1')
    .option('--token-env <name>', 'environment variable holding the admin token', 'REA_ADMIN_TOKEN')
    .option('--no-auth', 'serve without credentials (loopback addresses only)')
    .option('--allowed-origin <origins>', 'comma-separated origins the panel is reached at through a proxy that rewrites Host (e.g. https://ops.example.com)', (v: string) => v.split(',').map((s) => s.trim()).filter(Boolean))
    .action(async (flags: PanelFlags) => {
      const { url, close } = await startPanel(flags);
      console.error(`rea panel: ${url}${flags.auth === false ? ' (no auth: loopback only)' : ''}; Ctrl-C stops`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
      await close();
    });
}

/** How long the panel waits for its database to answer before it serves anyway. */
const OPEN_WAIT_MS = 15_000;

async function openWithin(bus: ReturnType<typeof adminBus>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  try {
    await Promise.race([bus.driver.admin.ping().catch(() => undefined), gaveUp]);
  } finally {
    clearTimeout(timer);
  }
}

/** The flags that say how an admin handler served by the CLI authenticates (rea panel, rea run --admin-port). */
export interface AdminServeFlags {
  host: string;
  auth?: boolean;
  tokenEnv: string;
  allowedOrigin?: string[];
}

/**
 * Credentials and allowed origins from the flags; `hostFlag` names the bind address's flag in errors.
 * Checked before anything opens, so a missing token is said at once.
 */
export function adminServeSettings(flags: AdminServeFlags, hostFlag: string): { auth: AdminAuth; allowedOrigins: string[] } {
  const noAuth = flags.auth === false;
  // A panel without credentials on a reachable address would hand the repair buttons to anyone.
  if (noAuth && !isLoopbackHost(flags.host)) throw new OptionsError(hostFlag, `--no-auth only binds a loopback address (127.0.0.1, ::1, localhost), not ${flags.host}`);
  const token = process.env[flags.tokenEnv];
  if (!noAuth && !token) throw new OptionsError('--token-env', `set ${flags.tokenEnv} to the admin token (e.g. export ${flags.tokenEnv}=$(openssl rand -hex 32)), or pass --no-auth on a loopback address`);
  // Checked here, so a token that is too short or holds a newline is named by its variable, not
  // by createAdminHandler's option (auth.token), which the operator never set.
  const auth: AdminAuth = noAuth ? 'none' : resolveAuth({ token: token! }, process.env, flags.tokenEnv);
  // Behind a proxy that passes its upstream's name as Host (nginx's default), the browser's Origin
  // is not the Host the panel sees: without these, every button was refused as cross-site.
  try {
    return { auth, allowedOrigins: checkOrigins(flags.allowedOrigin) };
  } catch (err) {
    throw err instanceof OptionsError ? flagError(err, (option) => (option === 'allowedOrigins' ? '--allowed-origin' : undefined)) ?? err : err;
  }
}

export async function startPanel(flags: PanelFlags): Promise<{ url: string; close: () => Promise<void> }> {
  const port = checkPort('--port', flags.port);
  const { auth, allowedOrigins } = adminServeSettings(flags, '--host');
  const bus = adminBus(flags);
  try {
    // Bind the port first, so a port in use is said at once rather than after the database has
    // opened (an embedded PGlite takes seconds; a server that is down, up to OPEN_WAIT_MS). Requests
    // wait for the database to open before they are served: /healthz would call a PGlite that is
    // still starting down (its check gives up after 2 s). A server that is down or does not answer
    // within OPEN_WAIT_MS is no reason not to serve: the panel and /healthz say so.
    const opened = openWithin(bus, OPEN_WAIT_MS);
    // The panel runs no handlers: this process's durations and delivery counts would be zeros.
    const panel = await servePanel(bus, { port, host: flags.host, auth, allowedOrigins, ready: opened, processMetrics: false })
      .catch((err: unknown) => Promise.reject(listenError(err, { host: flags.host, port, flag: '--port' })));
    await opened;
    await warnIfTooNew(bus);
    return { url: panel.url, close: async () => { await panel.close(); await bus.stop(); } };
  } catch (err) {
    await bus.stop();
    throw err;
  }
}

/**
 * The panel's actions are refused on a schema a newer rea marked breaking (guardWrites), its pages
 * are not: say so once at start, rather than first at a button. A database that does not answer
 * is the pages' to say.
 */
async function warnIfTooNew(bus: ReturnType<typeof adminBus>): Promise<void> {
  const status = await bus.driver.migrationStatus?.().catch(() => undefined);
  if (!status?.breaking.length) return;
  console.error(`rea panel: warning: schema "${bus.schema}" has migration${status.breaking.length > 1 ? 's' : ''} ${status.breaking.join(', ')} of a newer rea, which older versions must not run against (this rea knows migrations up to ${status.knownUpTo}): its pages read it, and may misread what that changed; every action is refused. Run a rea at least as new`);
}

/** A listen error on host:port as a usage error naming the port and `flag`; others as they are. */
export function listenError(err: unknown, o: { host: string; port: number; flag: string; hostFlag?: string }): unknown {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'EADDRINUSE') return new OptionsError(o.flag, `port ${o.port} on ${o.host} is already in use; pick another with ${o.flag}, or 0 for a free one`);
  if (code === 'EACCES') return new OptionsError(o.flag, `not permitted to listen on port ${o.port} on ${o.host} (EACCES); pick a port above 1023 with ${o.flag}, or 0 for a free one`);
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') return new OptionsError(o.hostFlag ?? '--host', `cannot listen on ${o.host}: no such local address (${code})`);
  return err;
}

/** Serve the admin handler for `bus` on host:port (0 picks a free port); the bus stays the caller's. */
export async function servePanel(
  bus: AdminBus,
  o: {
    port: number; host: string; auth: AdminAuth; allowedOrigins?: string[];
    /** Requests wait for it before they are handled. */ ready?: Promise<void>;
    /** As createAdminHandler's (default true). */ processMetrics?: boolean;
  },
): Promise<{ url: string; close: () => Promise<void> }> {
  if (o.auth === 'none' && !isLoopbackHost(o.host)) throw new OptionsError('host', `auth 'none' only binds a loopback address, not ${o.host}`);
  const handler = createAdminHandler(bus, { auth: o.auth, allowedOrigins: o.allowedOrigins, processMetrics: o.processMetrics });
  const { ready } = o;
  const server = createServer(ready ? (req, res) => void ready.then(() => handler(req, res)) : handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, resolve);
  });
  const address = server.address();
  const actual = typeof address === 'object' && address ? address.port : o.port;
  const shown = o.host.includes(':') ? `[${o.host}]` : o.host;
  return {
    url: `http://${shown}:${actual}/`,
    close: async () => {
      handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
