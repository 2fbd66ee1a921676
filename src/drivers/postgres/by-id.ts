// Statements that write jobs named by id, and only those still in some state. A queue table's
// statistics lag behind it: analyzed while few jobs ran or waited, it may hold thousands of
// running jobs, or a backlog of a million waiting ones, by the time these run. A state
// restriction written as a literal (`state = 'running'`, `state in ('available', 'retryable')`)
// matches the predicate of a partial index (jobs_lease_idx, jobs_claim_idx), and the planner,
// expecting few such rows, then read every running or waiting job and every dead entry of that
// index instead of probing the primary key once per id. Comparing the state with a value the
// planner cannot see into keeps those indexes out of these plans (test/plans.test.ts).

/**
 * A worker's batch of jobs to finish (`d`, from the given unnest) that are still running at that
 * attempt: join it with `j.state = d.running`, a join clause rather than a restriction. In figure 1
 * without inline delivery the literal form read ~8,300 index entries per completion of 200.
 */
export const runningBatch = (unnest: string) =>
  /* sql */ `with d as materialized (select d.*, 'running'::text as running from ${unnest})`;

/** `state = any (WAITING)`: available or retryable, as a value computed at run time (an operator's cancel or discard by id). */
export const WAITING = /* sql */ `array(select unnest('{available,retryable}'::text[]))`;

/** `state = any (BUSY)`: waiting or running, as a value computed at run time (looked up by event id, through jobs_event_idx). */
export const BUSY = /* sql */ `array(select unnest('{available,retryable,running}'::text[]))`;
