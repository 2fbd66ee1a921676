// The admin read statements for PostgreSQL and PGlite (lists with keyset pagination, the leader
// lease, operator discards), named after the AdminExecutor method that runs each one.
import { WAITING } from './by-id.js';
import { isoTime } from './sql-time.js';

const eventColumns = /* sql */ `
  id::text as id, type, subject, trace_id, created_by, created_at, fanned_out_at, fan_attempts,
  poisoned_at, last_error, left(payload::text, 200) as payload_preview`;

// One statement per state, so the state predicate is a literal the planner can match to the
// partial indexes (unfanned rows by id, poisoned rows) instead of a generic `$n is null or …`.
const stateClauses = {
  all: 'true',
  unfanned: 'fanned_out_at is null and poisoned_at is null',
  fanned: 'fanned_out_at is not null',
  poisoned: 'poisoned_at is not null',
} as const;

export function postgresAdminStatements(s: string) {
  const eventList = (state: keyof typeof stateClauses) => /* sql */ `
select ${eventColumns}
from ${s}.events e
where ${stateClauses[state]}
  and ($1::uuid is null or id < $1::uuid)
  and ($2::uuid is null or id >= $2::uuid)
  and ($3::uuid is null or id < $3::uuid)
  and ($4::text is null or type like $4)
  and ($5::text is null or subject = $5)
  and ($6::text is null or trace_id = $6)
order by e.id desc
limit $7`;

  return {
    eventListAll: eventList('all'),
    eventListUnfanned: eventList('unfanned'),
    eventListFanned: eventList('fanned'),
    eventListPoisoned: eventList('poisoned'),

    jobList: /* sql */ `
select j.id::text as id, j.event_id::text as event_id, j.kind, j.target, j.state, j.attempt, j.max_attempts,
       j.priority, j.coalesced, j.scheduled_at, j.attempted_at, j.finalized_at, j.lease_expires_at,
       j.created_at, j.errors, e.type as event_type, e.subject as event_subject
from ${s}.jobs j
left join ${s}.events e on e.id = j.event_id
where ($1::text is null or j.state = $1)
  and ($2::text is null or j.kind = $2)
  and ($3::text is null or j.target = $3)
  and ($4::uuid is null or j.event_id = $4::uuid)
  and ($5::bigint is null or j.id < $5::bigint)
order by j.id desc
limit $6`,

    // Only waiting jobs: a running job belongs to its worker, whose completion would otherwise
    // race the operator (cancel it after it finishes, or let it run).
    jobDiscard: /* sql */ `
update ${s}.jobs
set state = 'discarded',
    finalized_at = coalesce($2::timestamptz, now()),
    lease_expires_at = null,
    errors = errors || jsonb_build_array(jsonb_build_object(
      'at', ${isoTime('coalesce($2::timestamptz, now())')}, 'attempt', attempt, 'name', 'DiscardedByOperator',
      'message', 'discarded by an operator (bus.jobs.discard: the API, the panel or the CLI)'))
where id = any($1::bigint[]) and state = any (${WAITING})
returning id::text as id`,

    handlerNames: /* sql */ `select name from ${s}.handlers order by name`,

    // Counts read jobs_claim_idx (waiting) and jobs_lease_idx (running), stopping at $1 (the limit + 1).
    handlerList: /* sql */ `
select h.name, h.patterns, h.seen_at, now() as read_at,
  (select count(*) from (select 1 from ${s}.jobs j
     where j.state in ('available', 'retryable') and j.kind = 'handler' and j.target = h.name limit $1) w)::int as waiting,
  (select count(*) from (select 1 from ${s}.jobs j
     where j.state = 'running' and j.kind = 'handler' and j.target = h.name limit $1) r)::int as running
from ${s}.handlers h
order by h.name`,

    handlersSeen: /* sql */ `update ${s}.handlers set seen_at = now() where name = any($1::text[])`,

    // The row goes (so the relay routes nothing more to it); the last column reads the row as it
    // was before the delete: why nothing was forgotten. Its waiting jobs go next, in batches
    // (handlerForgetCancel).
    handlerForget: /* sql */ `
with gone as (
  delete from ${s}.handlers
  where name = $1 and ($2::float8 is null or seen_at < now() - $2::float8 * interval '1 millisecond')
  returning name
)
select (select count(*) from gone)::int as forgotten,
       (select seen_at from ${s}.handlers where name = $1) as seen_at`,

    // One batch of a forgotten handler's waiting jobs, cancelled with a line in their history:
    // the next $4 by id after the cursor $3, while no bus has stored the handler again. Running
    // jobs are left to finish (or to the rescuer). $1 the handler, $2 now.
    handlerForgetCancel: /* sql */ `
with batch as materialized (
  select j.id from ${s}.jobs j
  where j.kind = 'handler' and j.target = $1 and j.state in ('available', 'retryable') and j.id > $3::bigint
    and not exists (select 1 from ${s}.handlers h where h.name = $1)
  order by j.id
  limit $4
), cancelled as (
  update ${s}.jobs j
  set state = 'cancelled', finalized_at = coalesce($2::timestamptz, now()), lease_expires_at = null,
      errors = errors || jsonb_build_array(jsonb_build_object(
        'at', ${isoTime('coalesce($2::timestamptz, now())')}, 'attempt', attempt, 'name', 'HandlerForgotten',
        'message', 'cancelled: its handler was forgotten (rea handlers forget)'))
  from batch b
  where j.id = b.id and j.state in ('available', 'retryable')
  returning j.id
)
select (select coalesce(array_agg(id::text), '{}') from cancelled) as ids,
       (select max(id)::text from batch) as last_id, (select count(*)::int from batch) as n`,

    leaderGet: /* sql */ `
select leader_id, elected_at, expires_at, now() as read_at
from ${s}.leader where name = 'default'`,

    ping: /* sql */ `select 1 as ok`,

    // A logout: its session is refused from now on; sessions that expired on their own go.
    adminSessionEnd: /* sql */ `
with expired as (
  delete from ${s}.admin_sessions_ended where expires_at < now()
)
insert into ${s}.admin_sessions_ended (id, expires_at) values ($1, $2)
on conflict (id) do nothing`,

    adminSessionEnded: /* sql */ `
select 1 from ${s}.admin_sessions_ended where id = $1`,
  };
}

export type PostgresAdminStatements = ReturnType<typeof postgresAdminStatements>;
