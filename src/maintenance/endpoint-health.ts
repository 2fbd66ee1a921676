// Disables endpoints that have failed continuously for too long (default 5 days), recording why.
// Re-enabling is the owner's act; until then fan-out enqueues nothing for them.
import type { Clock } from '../core/clock.js';
import type { Lifecycle } from '../core/lifecycle.js';
import type { Driver } from '../driver/types.js';
import type { MaintenanceService } from './service.js';

export interface EndpointHealthOptions {
  intervalMs: number;
  /** Failing continuously at least this long → disabled. */
  disableAfterMs: number;
  /** Endpoints disabled per statement. */
  batchSize: number;
}

export class EndpointHealth implements MaintenanceService {
  readonly name = 'endpoint-health';
  readonly intervalMs: number;

  constructor(
    private readonly driver: Driver,
    private readonly options: EndpointHealthOptions,
    private readonly deps: { clock: Clock; lifecycle: Lifecycle },
  ) {
    this.intervalMs = options.intervalMs;
  }

  async runOnce(): Promise<{ disabled: string[] }> {
    const reason = `no successful delivery for ${describeMs(this.options.disableAfterMs)}; re-enable it once the receiver works`;
    const disabled: string[] = [];
    for (;;) {
      const ids = await this.driver.webhooks.endpointDisableFailing({
        failingForMs: this.options.disableAfterMs, reason, limit: this.options.batchSize, now: this.deps.clock.now(),
      });
      disabled.push(...ids);
      for (const id of ids) this.deps.lifecycle.emit('endpoint:state', { endpointId: id, state: 'disabled', reason });
      if (ids.length < this.options.batchSize) break;
    }
    return { disabled };
  }
}

export function describeMs(ms: number): string {
  const units: [number, string][] = [[86_400_000, 'day'], [3_600_000, 'hour'], [60_000, 'minute'], [1000, 'second']];
  for (const [size, name] of units) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${name}${ms / size === 1 ? '' : 's'}`;
  }
  return `${ms} ms`;
}
