// Returns jobs whose lease expired (their worker crashed, was killed or lost its connection) to
// the queue, or discards them when they have used their attempts.
import type { Clock } from '../core/clock.js';
import type { Lifecycle } from '../core/lifecycle.js';
import type { Driver } from '../driver/types.js';
import type { MaintenanceService } from './service.js';

export class Rescuer implements MaintenanceService {
  readonly name = 'rescuer';
  constructor(
    private readonly driver: Driver,
    readonly intervalMs: number,
    private readonly batchSize: number,
    private readonly deps: { clock: Clock; lifecycle: Lifecycle },
  ) {}

  async runOnce(): Promise<{ rescued: number; discarded: number }> {
    const total = { rescued: 0, discarded: 0 };
    for (;;) {
      const r = await this.driver.executor.jobRescue({ limit: this.batchSize, now: this.deps.clock.now() });
      total.rescued += r.rescued;
      total.discarded += r.discarded;
      if (r.rescued + r.discarded < this.batchSize) break;
    }
    if (total.rescued + total.discarded > 0) this.deps.lifecycle.emit('jobs:rescued', total);
    return total;
  }
}
