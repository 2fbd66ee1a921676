// The SQL of the operations executor (retention, overview facts, job repair) for PostgreSQL and
// PGlite. `s` is the quoted schema. Time arrives as $1 and is read as coalesce($1, now()).
import { BUSY, WAITING } from './by-id.js';

/**
 * The smallest UUIDv7 of the millisecond of `ts`: every id made before that millisecond sorts
 * below it, so "older than the cutoff" becomes a primary-key range scan instead of a new index.
 * Clamped at the epoch because to_hex of a negative number would not be 12 digits.
 */
function uuidFloor(ts: string): string {
  return `(lpad(to_hex(greatest(0, floor(extract(epoch from ${ts}) * 1000))::bigint), 12, '0') || '70008000000000000000')::uuid`;
}

// $1 now, $2 window in ms. Every retention statement starts from these two.
const cutoff = /* sql */ `
with cutoff as (
  select at, ${uuidFloor('at')} as id
  from (select coalesce($1::timestamptz, now()) - $2::bigint * interval '1 millisecond' as at) t
)`;

const EVENT_COLUMNS = 'id, type, subject, payload, trace_id, span_id, trace_flags, created_by, version, created_at, fanned_out_at, fan_attempts, poisoned_at, last_error, delivered_inline';

export function postgresOperationsStatements(s: string) {
  // Fanned, not poisoned, old by both id (the index) and created_at (the truth, should an app
  // clock have been skewed), and no job of it still waiting or running: a job whose retries
  // outlast the window must still find its event. Nor a discarded one, while the jobs rule keeps
  // it: the jobs_discarded alert says to fix the handler and retry them, and a retried job needs
  // its event (a webhook's 18 attempts take ~4 of the 7 days).
  const unawaited = /* sql */ `not exists (
      select 1 from ${s}.jobs j
      where j.event_id = e.id and j.state in ('available', 'running', 'retryable', 'discarded'))`;
  const eventVictims = (lock: boolean) => /* sql */ `
  select e.id from ${s}.events e, cutoff
  where e.id < cutoff.id and e.created_at < cutoff.at
    and e.fanned_out_at is not null and e.poisoned_at is null
    and ${unawaited}
  order by e.id
  limit $3${lock ? '\n  for update of e skip locked' : ''}`;

  const archiveVictims = (lock: boolean) => /* sql */ `
  select a.id from ${s}.events_archive a, cutoff
  where a.id < cutoff.id and a.archived_at < cutoff.at
  order by a.id
  limit $3${lock ? '\n  for update of a skip locked' : ''}`;

  // jobs_finalized_idx is (state, finalized_at) where finalized_at is not null: a range scan.
  const jobVictims = (lock: boolean) => /* sql */ `
  select j.id from ${s}.jobs j
  where j.state = $4 and j.finalized_at is not null and j.finalized_at < (select at from cutoff)
  order by j.finalized_at
  limit $3${lock ? '\n  for update of j skip locked' : ''}`;

  // Consume records sort by event_id (UUIDv7), and a consume is never older than its event.
  const consumeVictims = (lock: boolean) => /* sql */ `
  select c.event_id, c.handler from ${s}.consumes c, cutoff
  where c.event_id < cutoff.id and c.consumed_at < cutoff.at
  order by c.event_id
  limit $3${lock ? '\n  for update of c skip locked' : ''}`;

  const count = (victims: string) => /* sql */ `${cutoff}, victims as (${victims})
select count(*)::int as n from victims`;

  const capped = (from: string, where: string) => /* sql */ `(select count(*) from (select 1 from ${from} where ${where} limit $1) x)::int`;

  // A retried job keeps its attempt counter (so a late completion from a long-dead attempt can
  // never match the new one) and gets the handler's current allowance on top of it; a webhook
  // delivery gets webhooks.maxAttempts (`webhookMax`, a parameter): its own max_attempts is the
  // total of every allowance so far, and taken as the allowance it doubled with each retry. Jobs
  // whose event retention already removed are left alone: they could only fail again.
  //
  // A handler's job is left alone while another job of that handler for the same event waits or
  // runs (a replay made one), and of several it would retry for one event (the dead letter and a
  // replay's) only the newest goes: two jobs would run the handler twice at once, which
  // events.replay refuses for the same reason. `pick` chooses the jobs to retry, `among` the
  // jobs a newer one of which goes instead; each is given the alias to apply to.
  //
  // A retry runs in two statements of one transaction. The first locks the events of its jobs
  // (jobRetryLockIds, jobRetryLockBatch: for no key update, in id order), as events.replay does;
  // this second one, with a snapshot taken after those locks, then sees a job that a concurrent
  // retry or replay of the same event committed meanwhile. Checked in one statement from a
  // snapshot taken before its locks, two operators retrying dead letters of one handler for one
  // event at once each found the other's still dead and both went: two waiting jobs. The same
  // lock keeps an events retention pass from deleting the event under the retried job (its
  // victims are locked for update, skip locked; see retentionLockEvents).
  const jobRetry = (pick: (alias: string) => string, among: (alias: string) => string, webhookMax: string) => /* sql */ `
with picked as (
  select j.id, coalesce(h.max_attempts, case when j.kind = 'webhook' then ${webhookMax}::int end, j.max_attempts) as allowance
  from ${s}.jobs j
  join ${s}.events e on e.id = j.event_id
  left join ${s}.handlers h on j.kind = 'handler' and h.name = j.target
  where ${pick('j')}
    and not (j.kind = 'handler' and exists (
      select 1 from ${s}.jobs o
      where o.event_id = j.event_id and o.kind = 'handler' and o.target = j.target and o.id <> j.id
        and (o.state = any (${BUSY}) or (o.id > j.id and ${among('o')}))))
  for update of j skip locked
  for key share of e
), retried as (
  update ${s}.jobs j
  set state = 'available', scheduled_at = coalesce($2::timestamptz, now()), finalized_at = null,
      lease_expires_at = null, max_attempts = j.attempt + picked.allowance
  from picked
  where j.id = picked.id
  returning j.id
)
select id::text as id from retried`;

  const lockEventsOf = (jobs: string) => /* sql */ `
select e.id from ${s}.events e
where e.id in (select j.event_id from ${jobs} j)
order by e.id
for no key update of e`;

  const retryByIds = (a: string) => `${a}.id = any($1::bigint[]) and ${a}.state in ('discarded', 'cancelled')`;
  // $state the state, $handler null or a handler's name.
  const retryByState = (a: string, state: string, handler: string) =>
    `${a}.state = ${state} and ${a}.finalized_at is not null and (${handler}::text is null or (${a}.kind = 'handler' and ${a}.target = ${handler}))`;

  // Events go in two statements of one transaction: the first locks the victims, the second,
  // with a snapshot taken after those locks, deletes those that are still unawaited. One
  // statement decided from a snapshot taken before its locks: a job made waiting in between (a
  // replay, a retry of a cancelled job) committed, and its event was deleted all the same. Those
  // writers lock the event (for key share) first, so they either make their job before the
  // second statement looks, or wait for the deletion and find no event.

  return {
    retentionLockEvents: /* sql */ `${cutoff}
select coalesce(array_agg(id), '{}') as ids from (${eventVictims(true)}) v`,

    // $1 the ids retentionLockEvents locked.
    retentionDeleteEvents: /* sql */ `
with gone as (
  delete from ${s}.events e where e.id = any($1::uuid[]) and ${unawaited} returning e.id
)
select count(*)::int as n from gone`,

    // $1 the ids retentionLockEvents locked, $2 now.
    retentionArchiveEvents: /* sql */ `
with gone as (
  delete from ${s}.events e where e.id = any($1::uuid[]) and ${unawaited} returning e.*
), moved as (
  insert into ${s}.events_archive (${EVENT_COLUMNS}, archived_at)
  select ${EVENT_COLUMNS}, coalesce($2::timestamptz, now()) from gone
  on conflict (id) do nothing
  returning 1
)
select count(*)::int as n from gone`,

    retentionCountEvents: count(eventVictims(false)),

    retentionDeleteArchive: /* sql */ `${cutoff}, victims as (${archiveVictims(true)}
), gone as (
  delete from ${s}.events_archive a using victims v where a.id = v.id returning 1
)
select count(*)::int as n from gone`,

    retentionCountArchive: count(archiveVictims(false)),

    retentionDeleteJobs: /* sql */ `${cutoff}, victims as (${jobVictims(true)}
), gone as (
  delete from ${s}.jobs j using victims v where j.id = v.id returning 1
)
select count(*)::int as n from gone`,

    retentionCountJobs: count(jobVictims(false)),

    retentionDeleteConsumes: /* sql */ `${cutoff}, victims as (${consumeVictims(true)}
), gone as (
  delete from ${s}.consumes c using victims v where c.event_id = v.event_id and c.handler = v.handler returning 1
)
select count(*)::int as n from gone`,

    retentionCountConsumes: count(consumeVictims(false)),

    /**
     * `t` and `c` are quoted, validated identifiers; `t` is one table, not partitioned and without
     * inheritance children (checked first: appTable). ctid needs no primary key; `= any(array)` is a TID scan.
     */
    retentionDeleteApp: (t: string, c: string) => /* sql */ `${cutoff}, victims as (
  select ctid from ${t} where ${c} < (select at from cutoff) limit $3 for update skip locked
), gone as (
  delete from ${t} where ctid = any(array(select ctid from victims)) returning 1
)
select count(*)::int as n from gone`,

    retentionCountApp: (t: string, c: string) => count(`select 1 from ${t} where ${c} < (select at from cutoff) limit $3`),

    // split: a partitioned table, or one with inheritance children. A ctid names a row only within
    // one of its tables, so retentionDeleteApp would also delete rows at the same place in others.
    // schema: where the name resolved, which for an unqualified name is the search_path's choice.
    appTable: /* sql */ `
select (select format_type(a.atttypid, a.atttypmod) from pg_attribute a
        where a.attrelid = c.oid and a.attname = $2 and a.attnum > 0 and not a.attisdropped) as column_type,
       c.relkind = 'p' or exists (select 1 from pg_inherits i where i.inhparent = c.oid) as split,
       n.nspname as schema
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where c.oid = to_regclass($1)`,

    // Every figure reads a partial index of live rows, or jobs_finalized_idx for final states,
    // and stops counting at $1 (the exact limit + 1); the executor estimates beyond that.
    overviewFacts: /* sql */ `
select
  now() as read_at,
  ${capped(`${s}.events`, 'fanned_out_at is null and poisoned_at is null')} as backlog,
  ${capped(`${s}.events`, 'poisoned_at is not null')} as poisoned,
  (select created_at from ${s}.events where fanned_out_at is null and poisoned_at is null
     order by id limit 1) as oldest_unfanned_at,
  -- $2 < 0: not asked (the executor asks only for a threshold within the exact limit).
  (select created_at from ${s}.events where $2::int >= 0 and fanned_out_at is null and poisoned_at is null
     order by id offset greatest($2::int, 0) limit 1) as backlog_crossed_at,
  (select min(poisoned_at) from ${s}.events where poisoned_at is not null) as poisoned_since,
  ${capped(`${s}.jobs`, `state = 'available'`)} as available,
  ${capped(`${s}.jobs`, `state = 'retryable'`)} as retryable,
  ${capped(`${s}.jobs`, `state = 'running'`)} as running,
  ${capped(`${s}.jobs`, `state = 'completed' and finalized_at is not null`)} as completed,
  ${capped(`${s}.jobs`, `state = 'discarded' and finalized_at is not null`)} as discarded,
  ${capped(`${s}.jobs`, `state = 'cancelled' and finalized_at is not null`)} as cancelled,
  (select min(finalized_at) from ${s}.jobs where state = 'discarded' and finalized_at is not null) as discarded_since,
  (select count(*) from ${s}.endpoints where state = 'disabled')::int as endpoints_disabled,
  (select min(disabled_at) from ${s}.endpoints where state = 'disabled') as endpoints_disabled_since,
  -- Handlers no running worker has had for $3 ms (-1: not asked) that still have waiting jobs;
  -- and names with waiting jobs but no handlers row (forgotten, then retried by name: nothing
  -- runs them), since the earliest of those jobs (among the first $1) came due. Those names are
  -- found by skipping from one target to the next through jobs_claim_idx: one probe a name.
  (select coalesce(json_agg(json_build_object('name', u.name, 'seen_at', u.seen_at, 'waiting', u.waiting, 'stored', u.stored) order by u.seen_at, u.name), '[]'::json)
   from (select h.name, h.seen_at, true as stored,
           (select count(*) from (select 1 from ${s}.jobs j
              where j.state in ('available', 'retryable') and j.kind = 'handler' and j.target = h.name limit $1) w)::int as waiting
         from ${s}.handlers h
         where $3::float8 >= 0 and h.seen_at < now() - $3::float8 * interval '1 millisecond'
         union all
         select t.target, (select min(j.scheduled_at) from (select j.scheduled_at from ${s}.jobs j
              where j.state in ('available', 'retryable') and j.kind = 'handler' and j.target = t.target limit $1) j), false,
           (select count(*) from (select 1 from ${s}.jobs j
              where j.state in ('available', 'retryable') and j.kind = 'handler' and j.target = t.target limit $1) w)::int
         from (with recursive targets as (
                 (select j.target from ${s}.jobs j where j.state in ('available', 'retryable') and j.kind = 'handler'
                  order by j.kind, j.target limit 1)
                 union all
                 select (select j.target from ${s}.jobs j
                         where j.state in ('available', 'retryable') and j.kind = 'handler' and j.target > p.target
                         order by j.kind, j.target limit 1)
                 from targets p where p.target is not null)
               select target from targets where target is not null) t
         where $3::float8 >= 0 and not exists (select 1 from ${s}.handlers h where h.name = t.target)) u
   where u.waiting > 0 and u.seen_at < now() - $3::float8 * interval '1 millisecond') as unattended_handlers,
  -- The next job in claim order of each stored handler, and of webhook deliveries (all endpoints
  -- together), that has been due longer than $4 ms (-1: not asked): when it came due. One probe a
  -- handler through jobs_claim_idx, one through jobs_claim_any_idx.
  (select coalesce(json_agg(json_build_object('kind', w.kind, 'target', w.target, 'due_at', w.due_at) order by w.due_at, w.target), '[]'::json)
   from (select 'handler' as kind, h.name as target,
           (select j.scheduled_at from ${s}.jobs j
            where j.state in ('available', 'retryable') and j.kind = 'handler' and j.target = h.name and j.scheduled_at <= now()
            order by j.priority, j.scheduled_at, j.id limit 1) as due_at
         from ${s}.handlers h
         where $4::float8 >= 0
         union all
         select 'webhook', null,
           (select j.scheduled_at from ${s}.jobs j
            where j.state in ('available', 'retryable') and j.kind = 'webhook' and j.scheduled_at <= now()
            order by j.priority, j.scheduled_at, j.id limit 1)
         where $4::float8 >= 0) w
   where w.due_at < now() - $4::float8 * interval '1 millisecond') as waiting_jobs`,

    /** The planner's row estimate for one figure, used once the exact count passed the limit. */
    estimate: {
      backlog: `explain (format json) select 1 from ${s}.events where fanned_out_at is null and poisoned_at is null`,
      poisoned: `explain (format json) select 1 from ${s}.events where poisoned_at is not null`,
      available: `explain (format json) select 1 from ${s}.jobs where state = 'available'`,
      retryable: `explain (format json) select 1 from ${s}.jobs where state = 'retryable'`,
      running: `explain (format json) select 1 from ${s}.jobs where state = 'running'`,
      completed: `explain (format json) select 1 from ${s}.jobs where state = 'completed' and finalized_at is not null`,
      discarded: `explain (format json) select 1 from ${s}.jobs where state = 'discarded' and finalized_at is not null`,
      cancelled: `explain (format json) select 1 from ${s}.jobs where state = 'cancelled' and finalized_at is not null`,
    } as Record<string, string>,

    // Every table of the schema, so tables added by later migrations (webhooks) show up unasked.
    tableSizes: /* sql */ `
select c.relname as name, pg_total_relation_size(c.oid)::float8 as total_bytes
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = $1 and c.relkind in ('r', 'p')
order by c.relname`,

    autovacuumEnabled: /* sql */ `select current_setting('autovacuum') = 'on' as on`,
    // Tables whose rows are written several times each and deleted by retention, and the others
    // whose dead rows nothing but VACUUM reclaims (measured with autovacuum off): an endpoint's
    // state change is never a HOT update (endpoints_failing_idx covers state and failing_since), so
    // a flaky endpoint flipping failing/enabled left a dead line pointer and index entry each
    // time (50,000 flips: 1.4 MB heap, 0.6 MB index for one row); deleted rows' space in
    // events_archive (archive retention) and admin_sessions_ended is only reused once VACUUM has
    // recorded it (100,000 rows archived, 2,000 kept: 16.7 MB). handlers (heartbeat) and leader
    // (renewals) are left out: their updates are HOT and pruned on access (500,000 heartbeat row
    // updates: still one 8 KB page).
    vacuumTables: ['jobs', 'events', 'consumes', 'webhook_attempts', 'endpoints', 'events_archive', 'admin_sessions_ended']
      .map((t) => /* sql */ `vacuum (analyze) ${s}.${t}`),

    handlerSchedules: /* sql */ `select name, max_attempts, lease_ms from ${s}.handlers order by name`,

    // A handler some bus registered, or one forgotten since whose jobs are still stored.
    handlerKnown: /* sql */ `
select exists (select 1 from ${s}.handlers where name = $1)
    or exists (select 1 from ${s}.jobs where kind = 'handler' and target = $1) as known`,

    // An event sent again to one handler (events.replay with a handler), in two statements of one
    // transaction: the first locks the event against another replay of it (and against retention,
    // which then waits or has deleted it); the second, with a snapshot taken after that lock, sees
    // a job a concurrent replay committed meanwhile. $1 the event id.
    eventReplayLock: /* sql */ `
select type, fanned_out_at is not null as fanned, poisoned_at is not null as poisoned
from ${s}.events where id = $1::uuid
for no key update`,

    // $1 the event id, $2 the handler, $3 the event's type, $4 now. A new job unless one of that
    // handler for the event still waits or runs; the handler's consume record goes, so a
    // transactional handler runs again instead of skipping an event it already consumed.
    // Routing as the relay's: the handler's LIKE patterns, from its row.
    eventReplayToHandler: /* sql */ `
with h as (
  select name, max_attempts, lease_ms, priority from ${s}.handlers where name = $2 and $3::text like any (like_patterns)
), waiting as (
  select id from ${s}.jobs
  where event_id = $1::uuid and kind = 'handler' and target = $2 and state in ('available', 'retryable', 'running')
  order by id limit 1
), forgot as (
  delete from ${s}.consumes c
  where c.event_id = $1::uuid and c.handler = $2 and exists (select 1 from h) and not exists (select 1 from waiting)
  returning 1
), inserted as (
  insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms, priority, coalesced, scheduled_at)
  select $1::uuid, 'handler', name, max_attempts, lease_ms, priority, 1, coalesce($4::timestamptz, now())
  from h where not exists (select 1 from waiting)
  returning id
)
select (select id::text from inserted) as job_id, (select id::text from waiting) as waiting_job_id,
       exists (select 1 from h) as subscribes, (select patterns from ${s}.handlers where name = $2) as patterns,
       (select count(*) from forgot)::int as forgot`,

    // Bulk replay to a handler, one batch per transaction, oldest first: the first statement locks
    // the next batch of fanned, unpoisoned events after the cursor that match the filter and the
    // handler's patterns; the second (a fresh snapshot) makes a job for each that has none of
    // that handler waiting or running, and deletes its consume records. $1 the handler, $2 the
    // cursor (exclusive), $3 minId, $4 maxId (exclusive), $5 type LIKE, $6 subject, $7 trace id, $8 limit.
    eventReplayBatchLock: /* sql */ `
select e.id::text as id
from ${s}.events e, ${s}.handlers h
where h.name = $1 and e.type like any (h.like_patterns)
  and e.fanned_out_at is not null and e.poisoned_at is null
  and ($2::uuid is null or e.id > $2::uuid)
  and ($3::uuid is null or e.id >= $3::uuid)
  and ($4::uuid is null or e.id < $4::uuid)
  and ($5::text is null or e.type like $5)
  and ($6::text is null or e.subject = $6)
  and ($7::text is null or e.trace_id = $7)
order by e.id
limit $8
for no key update of e`,

    // $1 the handler, $2 the locked event ids, $3 now.
    eventReplayBatch: /* sql */ `
with waiting as (
  select distinct event_id from ${s}.jobs
  where event_id = any($2::uuid[]) and kind = 'handler' and target = $1 and state in ('available', 'retryable', 'running')
), picked as (
  select id from unnest($2::uuid[]) as t(id) where id not in (select event_id from waiting)
), forgot as (
  delete from ${s}.consumes c using picked p where c.event_id = p.id and c.handler = $1 returning 1
), inserted as (
  insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms, priority, coalesced, scheduled_at)
  select p.id, 'handler', h.name, h.max_attempts, h.lease_ms, h.priority, 1, coalesce($3::timestamptz, now())
  from picked p, ${s}.handlers h where h.name = $1
  order by p.id
  returning 1
)
select (select count(*) from inserted)::int as replayed, (select count(*) from waiting)::int as skipped`,

    // $1 the job ids: the events of all of them, whatever their state, so none the retry takes is unlocked.
    jobRetryLockIds: /* sql */ `select count(*)::int as n from (${lockEventsOf(`(select event_id from ${s}.jobs where id = any($1::bigint[]))`)}) l`,
    // $1 the job ids, $2 now, $3 webhooks.maxAttempts.
    jobRetryByIds: jobRetry(retryByIds, retryByIds, '$3'),

    // By state, in batches: "retry every dead letter" after an endpoint or a handler was down for
    // days is one transaction per batch, not one holding every row at once. The batch is the next
    // $4 jobs by id after the cursor $3 that match ($1 the state, $2 null or a handler), chosen
    // before the checks, which then run on those rows only (run on every match before the limit,
    // they made a retry of 100,000 dead letters take minutes); their events are locked. The
    // statement says where the batch ended and how many it held, so a batch whose jobs were all
    // left alone goes on.
    jobRetryLockBatch: /* sql */ `
with batch as materialized (
  select j.id, j.event_id from ${s}.jobs j
  where ${retryByState('j', '$1', '$2')} and j.id > $3::bigint
  order by j.id
  limit $4
), locked as (${lockEventsOf('batch')})
select (select coalesce(array_agg(id::text), '{}') from batch) as ids, (select max(id)::text from batch) as last_id,
       (select count(*)::int from batch) as n, (select count(*)::int from locked) as locked`,
    // $1 the state, $2 now, $3 null or a handler, $4 the batch's job ids, $5 webhooks.maxAttempts.
    jobRetryBatch: jobRetry(
      (a) => `${a}.id = any($4::bigint[]) and ${retryByState(a, '$1', '$3')}`,
      (a) => retryByState(a, '$1', '$3'),
      '$5',
    ),

    // Only waiting jobs: a running job's handler may already have made its effect, so calling it
    // cancelled would be a lie. The claim locks the row first, so the two never both win.
    jobCancel: /* sql */ `
update ${s}.jobs
set state = 'cancelled', finalized_at = coalesce($2::timestamptz, now()), lease_expires_at = null
where id = any($1::bigint[]) and state = any (${WAITING})
returning id::text as id`,

    // waiting_job_id: another job of the same handler for the same event that waits or runs (why jobRetry left this one alone).
    jobStates: /* sql */ `
select j.id::text as id, j.state, j.attempt, j.attempted_by, j.scheduled_at, exists (select 1 from ${s}.events e where e.id = j.event_id) as event_found,
       j.errors -> -1 ->> 'name' as last_error_name, j.errors -> -1 ->> 'message' as last_error_message,
       (select o.id::text from ${s}.jobs o
        where j.kind = 'handler' and o.event_id = j.event_id and o.kind = 'handler' and o.target = j.target
          and o.id <> j.id and o.state = any (${BUSY})
        order by o.id limit 1) as waiting_job_id
from ${s}.jobs j where j.id = any($1::bigint[]) order by j.id`,
  };
}

export type PostgresOperationsStatements = ReturnType<typeof postgresOperationsStatements>;
