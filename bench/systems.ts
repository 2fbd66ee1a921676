// The systems under test, by name, loaded lazily: the figure-1 worker child must carry only its own
// system's libraries, or its peak RSS would include the other two. rea first: the issue asks for
// rea, graphile, pg-boss, rea, ….
import type { System, SystemName } from './lib/system.js';

const LOADERS: Record<SystemName, () => Promise<System>> = {
  'rea': () => import('./rea.js').then((m) => m.rea),
  'graphile-worker': () => import('./peers/graphile.js').then((m) => m.graphile),
  'pg-boss': () => import('./peers/pgboss.js').then((m) => m.pgboss),
};

export const SYSTEM_NAMES = Object.keys(LOADERS) as SystemName[];

export async function loadSystem(name: string): Promise<System> {
  const load = LOADERS[name as SystemName];
  if (!load) throw new Error(`unknown system ${name}`);
  return load();
}

export async function loadSystems(): Promise<System[]> {
  return Promise.all(SYSTEM_NAMES.map(loadSystem));
}
