// GET /healthz: the database answers and some instance has held the leader lease recently (the
// leader runs maintenance: rescue, retention, endpoint health). 200 when both hold, else 503.
import { within } from '../core/within.js';
import type { AdminExecutor, HealthRead } from '../driver/admin.js';
import type { AdminBus } from './route.js';

export interface Health {
  status: 'ok' | 'unavailable';
  database: 'up' | 'down';
  /** 'seen': a lease that is valid now or expired less than the grace ago. */
  leader: 'seen' | 'stale' | 'none' | 'unknown';
  /** How long ago the lease expired; null while it is valid, or without a lease. */
  leaderExpiredAgoMs: number | null;
  /** How long the lease is still valid; null once it has expired, or without a lease. */
  leaderValidForMs: number | null;
}

export async function checkHealth(bus: AdminBus, graceMs: number, timeoutMs = 2000): Promise<Health> {
  let lease;
  try {
    // Never on a pool connection, and at most one in flight: see the driver's healthRead.
    const admin = bus.driver.admin;
    ({ lease } = await (admin.healthRead ? admin.healthRead({ timeoutMs }) : raceHealthRead(admin, timeoutMs)));
  } catch {
    // The reason stays in the server's log; the endpoint is unauthenticated and says only "down".
    return { status: 'unavailable', database: 'down', leader: 'unknown', leaderExpiredAgoMs: null, leaderValidForMs: null };
  }
  // The database answers but the lease cannot be read: not migrated, or no permission.
  if (lease === undefined) return { status: 'unavailable', database: 'up', leader: 'unknown', leaderExpiredAgoMs: null, leaderValidForMs: null };
  if (!lease) return { status: 'unavailable', database: 'up', leader: 'none', leaderExpiredAgoMs: null, leaderValidForMs: null };
  // Both times are the database's (readAt is its now()), so the two clocks never disagree.
  const ago = lease.readAt.getTime() - lease.expiresAt.getTime();
  const seen = ago <= graceMs;
  return {
    status: seen ? 'ok' : 'unavailable', database: 'up', leader: seen ? 'seen' : 'stale',
    leaderExpiredAgoMs: ago > 0 ? ago : null, leaderValidForMs: ago > 0 ? null : -ago,
  };
}

/** A Driver without healthRead: ping, then the lease, on its own connections, both within timeoutMs. */
async function raceHealthRead(admin: AdminExecutor, timeoutMs: number): Promise<HealthRead> {
  const deadline = performance.now() + timeoutMs;
  await within(admin.ping(), timeoutMs);
  return { lease: await within(admin.leaderGet(), Math.max(0, deadline - performance.now())).catch(() => undefined) };
}
