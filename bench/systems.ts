// The systems under test, by name, loaded lazily: the figure-1 worker child must carry only its own
// system's libraries, or its peak RSS would include the other two. rea first: the issue asks for
// rea, graphile, pg-boss, rea, ….
import { PROTOTYPE_NAMES, type PrototypeName, type System, type SystemName } from './lib/system.js';

const LOADERS: Record<Exclude<SystemName, PrototypeName>, () => Promise<System>> = {
  'rea': () => import('./rea.js').then((m) => m.rea),
  'graphile-worker': () => import('./peers/graphile.js').then((m) => m.graphile),
  'pg-boss': () => import('./peers/pgboss.js').then((m) => m.pgboss),
};

const isPrototype = (name: string): name is PrototypeName => (PROTOTYPE_NAMES as readonly string[]).includes(name);

export async function loadSystem(name: string): Promise<System> {
  if (isPrototype(name)) return import('./experiments/lean-rounds.js').then((m) => m.prototypes.find((p) => p.name === name)!);
  const load = LOADERS[name as keyof typeof LOADERS];
  if (!load) throw new Error(`unknown system ${name}`);
  return load();
}

/** rea and its peers; with `prototypes`, figure 1's prototypes after them. */
export async function loadSystems({ prototypes = false } = {}): Promise<System[]> {
  return Promise.all([...Object.keys(LOADERS), ...(prototypes ? PROTOTYPE_NAMES : [])].map(loadSystem));
}
