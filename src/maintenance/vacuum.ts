// Dead rows are a runaway too: every job row is written three times and then deleted. rea's
// tables ask autovacuum for a pass at 2 % dead rows, but autovacuum is a server setting and may
// be off (it is on some CI and appliance servers), and PGlite has no background workers at all.
// Then, and only then by default, the leader vacuums rea's high-churn tables itself, so their
// size still plateaus.
import type { Lifecycle } from '../core/lifecycle.js';
import type { Logger } from '../core/logger.js';
import type { Driver } from '../driver/types.js';
import type { MaintenanceService } from './service.js';

export type VacuumMode = 'auto' | 'always' | 'never';

export class Vacuum implements MaintenanceService {
  readonly name = 'vacuum';
  private warned = false;
  private armed = false;

  constructor(
    private readonly driver: Driver,
    readonly intervalMs: number,
    private readonly mode: VacuumMode,
    private readonly deps: { lifecycle: Lifecycle; log: Logger },
  ) {}

  async runOnce(): Promise<{ vacuumed: string[] }> {
    // The first pass waits one interval: a process that just took the lead (a deploy, a
    // restart) should get its backlog moving before it spends I/O on vacuum.
    if (!this.armed) {
      this.armed = true;
      return { vacuumed: [] };
    }
    if (this.mode === 'never') return { vacuumed: [] };
    if (this.mode === 'auto' && this.driver.capabilities.autovacuumDaemon && (await this.driver.operations.autovacuumEnabled())) {
      return { vacuumed: [] };
    }
    if (this.mode === 'auto' && !this.warned) {
      this.warned = true;
      this.deps.log.warn({}, "the server's autovacuum is off: rea's leader vacuums rea's tables itself; turn autovacuum on for the rest of the database");
    }
    const vacuumed = await this.driver.operations.vacuumTables();
    this.deps.lifecycle.emit('tables:vacuumed', { tables: vacuumed });
    return { vacuumed };
  }
}
