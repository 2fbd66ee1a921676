// One opener per PGlite data directory. PGlite is PostgreSQL inside one process with no postmaster,
// so nothing keeps a second process off the same files; two at once can corrupt them. rea takes
// <dir>/rea.lock (created exclusively, holding its pid) before it opens a directory, and removes it
// on close or exit. A lock whose process is gone (kill -9, a crash) is taken over.
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { DataDirLockedError, OptionsError } from '../../core/errors.js';

export const LOCK_FILE = 'rea.lock';

/**
 * Lock files this process holds (absolute paths): what the exit hook removes. Kept on globalThis so
 * that two copies of rea loaded in one process (its build and its sources, two versions) share it.
 */
const shared = ((globalThis as { [key: symbol]: unknown })[Symbol.for('rea.pglite.locks')] ??= { held: new Set<string>(), exitHook: false }) as {
  held: Set<string>;
  exitHook: boolean;
};
const held = shared.held;

/**
 * The directory on disk a PGlite dataDir names, or null when it names none (in memory, or a
 * browser's storage). The same reading as PGlite's own: file://path or a bare path is on disk.
 */
export function pgliteDirOnDisk(dataDir: string): string | null {
  if (dataDir.startsWith('file://')) return dataDir.slice('file://'.length) || null;
  if (dataDir === '' || /^(memory|idb|opfs-ahp|memfs2opfs):\/\//.test(dataDir)) return null;
  return dataDir;
}

export interface DataDirLock {
  readonly path: string;
  /** Remove the lock file, if it is still this process's; calling it twice is harmless. */
  release(): void;
}

/**
 * Take `dir`'s lock (creating the directory if missing) or throw DataDirLockedError naming its
 * holder; OptionsError (`database.pglite`) when the path cannot be a directory rea writes in.
 */
export function lockDataDir(dir: string): DataDirLock {
  const directory = resolve(dir);
  try {
    makeDirectory(directory);
  } catch (err) {
    throw unusableDir(directory, 'create', err);
  }
  const path = join(directory, LOCK_FILE);
  // Each pass ends with the lock taken, a refusal, or a stale lock removed; several passes only
  // when other processes take, release or take over the same lock at the same moment.
  for (let pass = 0; pass < 10; pass++) {
    let created: boolean;
    try {
      created = createWithPid(path);
    } catch (err) {
      throw unusableDir(directory, 'write in', err);
    }
    if (created) return hold(path);
    const holder = readHolder(path);
    if (holder === 'gone') continue; // released meanwhile
    if (holder !== 'unreadable' && isLive(holder, path)) throw new DataDirLockedError(directory, holder, path);
    removeStale(path, holder);
  }
  const holder = readHolder(path);
  throw new DataDirLockedError(directory, typeof holder === 'number' ? holder : 0, path);
}

/**
 * mkdir -p, one level at a time from the nearest one that exists. Node 20's
 * mkdirSync(…, { recursive: true }) never returns (100 % CPU) when a parent is on a file system
 * that answers ENOENT to mkdir, as /proc does: `--pglite /proc/nope/x` hung the CLI.
 */
function makeDirectory(directory: string): void {
  const missing: string[] = [];
  for (let d = directory; !existsSync(d) && dirname(d) !== d; d = dirname(d)) missing.push(d);
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d);
    } catch (err) {
      // Made by another process meanwhile is as good.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || !statSync(d).isDirectory()) throw err;
    }
  }
  if (!statSync(directory).isDirectory()) throw Object.assign(new Error(`EEXIST: ${directory} is a file`), { code: 'EEXIST' });
}

/**
 * A path that cannot be a data directory is a wrong option, named as such (before, createBus threw
 * the bare fs error: "EEXIST: file already exists, mkdir …"). Other fs errors pass as they are.
 */
function unusableDir(directory: string, act: 'create' | 'write in', err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException)?.code;
  const problem =
    code === 'EEXIST' ? `${directory} is a file, not a directory: give the path of a directory (created if missing)`
    : code === 'ENOTDIR' ? `${directory} is not a directory: a part of its path is a file`
    : code === 'EACCES' || code === 'EPERM' ? `cannot ${act} ${directory}: permission denied (${code}); give a directory this process may write in`
    : code === 'EROFS' ? `cannot ${act} ${directory}: the file system is read-only (EROFS)`
    : code === 'ENOENT' ? `cannot ${act} ${directory}: a directory on its path cannot be made there (ENOENT)`
    : null;
  return problem === null ? err : new OptionsError('database.pglite', problem, { cause: err });
}

function hold(path: string): DataDirLock {
  held.add(path);
  if (!shared.exitHook) {
    shared.exitHook = true;
    // A process that ends without closing its bus (process.exit, an uncaught error) leaves no lock behind.
    process.once('exit', () => {
      for (const p of held) removeIfOurs(p);
    });
  }
  return {
    path,
    release: () => {
      if (held.has(path)) removeIfOurs(path);
    },
  };
}

function removeIfOurs(path: string): void {
  held.delete(path);
  try {
    if (readHolder(path) === process.pid) unlinkQuietly(path);
  } catch {
    // The directory went away or became unreadable: there is no lock left to remove, or none
    // rea can remove; either way closing the bus (or exiting) must not fail on it.
  }
}

/** Create `path` only if it does not exist, holding this process's pid; false when it exists. */
function createWithPid(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  try {
    writeSync(fd, `${process.pid}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * The pid a lock file holds; 'gone' when there is no file, 'unreadable' when it holds no pid. An
 * empty file may be one being written this instant (created, pid not yet in it): it is read again
 * for a short while before it counts as unreadable (its writer died between the two).
 */
function readHolder(path: string): number | 'gone' | 'unreadable' {
  for (let tries = 0; ; tries++) {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'gone';
      throw err;
    }
    const pid = Number(text.trim());
    if (text.trim() !== '' && Number.isSafeInteger(pid) && pid > 0) return pid;
    if (text !== '' || tries >= 10) return 'unreadable';
    sleepSync(10);
  }
}

/**
 * The lock's holder still has the directory. This process's own pid counts only if it took the
 * lock itself: otherwise the file is from an earlier process that had the same pid (a container
 * restarted, its process pid 1 again).
 */
function isLive(pid: number, path: string): boolean {
  if (pid === process.pid) return held.has(path);
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Remove a lock its holder left behind. Two processes may find the same stale lock: the one that
 * creates <lock>.takeover removes it, and only if it still holds the stale pid, so a lock another
 * process took meanwhile stays. A takeover file whose process died is removed, and the caller tries again.
 */
function removeStale(path: string, stale: number | 'unreadable'): void {
  const guard = `${path}.takeover`;
  if (!createWithPid(guard)) {
    const taker = readHolder(guard);
    if (taker === 'unreadable' || (typeof taker === 'number' && !isLive(taker, guard))) unlinkQuietly(guard);
    else sleepSync(10);
    return;
  }
  try {
    if (readHolder(path) === stale) unlinkQuietly(path);
  } finally {
    unlinkQuietly(guard);
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
