// Jobs a worker holds (running, or claimed and buffered), per kind and per target of a kind. They
// change at every start and end of a job, so they are kept without building a key string per job;
// a target at zero is dropped (webhook targets are many: one per endpoint).
import type { JobKind } from '../driver/types.js';

const NONE: ReadonlyMap<string, number> = new Map();

export class JobCounts {
  private readonly kinds = new Map<JobKind, { all: number; targets: Map<string, number> }>();

  add(job: { kind: JobKind; target: string }, by: number): void {
    let k = this.kinds.get(job.kind);
    if (!k) this.kinds.set(job.kind, (k = { all: 0, targets: new Map() }));
    k.all += by;
    const n = (k.targets.get(job.target) ?? 0) + by;
    if (n > 0) k.targets.set(job.target, n);
    else k.targets.delete(job.target);
  }

  /** Of one target of `kind`, or of all of them. */
  of(kind: JobKind, target?: string): number {
    const k = this.kinds.get(kind);
    if (!k) return 0;
    return target === undefined ? k.all : k.targets.get(target) ?? 0;
  }

  /** Per target of `kind`, only those holding some. */
  targets(kind: JobKind): ReadonlyMap<string, number> {
    return this.kinds.get(kind)?.targets ?? NONE;
  }
}
