// Every SQL statement the PostgreSQL and PGlite drivers run, named after the executor method that
// runs it. `s` is the already-quoted schema. Time comes in as a parameter: coalesce($now, now()).
import { runningBatch } from './by-id.js';
import { isoTime } from './sql-time.js';

/**
 * Due jobs a capped '*' claim reads in due order before it walks the targets instead (claim):
 * targets at their cap may fill that many with jobs it cannot take.
 */
export const CLAIM_LOOKAHEAD = 256;

/**
 * (target, priority) heads a capped claim's walk reads at most (claim): it goes on from where the
 * worker's last walk ended, so however many targets have waiting jobs, a claim costs at most this
 * many index descents, and every target comes round in turn.
 */
export const CLAIM_WALK = 128;

/**
 * Walks one claim makes at most while they find nothing and have not come round (the executor's
 * jobClaim): a due delivery behind many targets whose deliveries are not due is reached in this
 * claim or a later one, at most CLAIM_WALK × CLAIM_WALK_ROUNDS heads read a claim.
 */
export const CLAIM_WALK_ROUNDS = 8;

/**
 * A failure's error entry (jsonb) as stored (jobFailMany, eventInlineFinish). One without `at` is
 * dated here, by the database's clock, the one its retry and the job's lease are dated by, and
 * `ageMs` before the statement began: when the run failed, not when its batch was written (late,
 * while the database was away). One with `at` was dated by an injected clock. statement_timestamp(),
 * not now(): an inline round's transaction began before its handlers ran.
 */
const datedError = (entry: string, ageMs: string) => /* sql */ `case when ${entry} ? 'at' then ${entry}
  else ${entry} || jsonb_build_object('at', ${isoTime(`statement_timestamp() - coalesce(${ageMs}, 0) * interval '1 millisecond'`)}) end`;

/** A job waiting to run (available or retryable): the predicate of jobs_claim_idx and jobs_claim_any_idx. */
const WAITING_STATE = `state in ('available', 'retryable')`;

/** Row `j` is a waiting job of `kind` and `target` (SQL expressions): the prefix of jobs_claim_idx. */
const waitingOf = (j: string, kind: string, target: string) => `${j}.${WAITING_STATE} and ${j}.kind = ${kind} and ${j}.target = ${target}`;

/**
 * The priorities the waiting jobs of `kind` and `target` have, one descent of jobs_claim_idx each
 * (a loose scan), as a FROM item with one column, priority. Per priority, the due jobs are a range
 * of the index that a scan leaves at the first job not yet due; read across priorities at once,
 * `scheduled_at <= now` is only a filter, and a check that found no due job read every waiting
 * job of the handler: 100,000 retries due in an hour (its downstream is down) cost each relay
 * round ~700 buffers (5-10 ms). The claim does not use it (see claim()).
 */
function waitingPriorities(s: string, kind: string, target: string): string {
  const of = (j: string) => waitingOf(j, kind, target);
  return /* sql */ `(
    with recursive wp(priority) as (
      (select wj.priority from ${s}.jobs wj where ${of('wj')} order by wj.priority limit 1)
      union all
      select (select wj.priority from ${s}.jobs wj where ${of('wj')} and wj.priority > wp.priority order by wj.priority limit 1)
      from wp where wp.priority is not null
    )
    select priority from wp where priority is not null)`;
}

/** Whether a job of (kind, target) waits due at `now`: per priority, its first job in due order (see waitingPriorities). */
function dueJobWaits(s: string, kind: string, target: string, now: string): string {
  return /* sql */ `exists (
    select 1 from ${waitingPriorities(s, kind, target)} dp
    cross join lateral (
      select 1 from ${s}.jobs dj
      where ${waitingOf('dj', kind, target)} and dj.priority = dp.priority
        and dj.scheduled_at <= ${now}
      order by dj.scheduled_at, dj.id
      limit 1) dj)`;
}

/**
 * jobClaim (capped false) and jobClaimCapped (capped true): one statement, one round trip.
 *
 * With no target at its cap, '*' reads jobs_claim_any_idx in due order, locking as it goes, and a
 * window keeps each held target to its room. With some at their cap, skipping them in that scan
 * is a filter on heap rows: a full endpoint with 100,000 due deliveries ahead of the others made
 * every claim read all 100,000 (50 ms, 2,249 buffers) before it reached another endpoint's, and
 * claims run each time a slot frees. So a capped claim reads only the first CLAIM_LOOKAHEAD due
 * jobs there, unlocked (`near`). When the full targets took so many of those that the others' are
 * too few, it walks jobs_claim_idx instead (`walk`): a loose index scan takes the first waiting job
 * of each (target, priority), one index descent each (`waiting`); the full targets are dropped by
 * name and the heads not yet due dropped; only the heads that come first in due order read more
 * of their target's jobs (`first_heads`). Of the candidates the first in due order are locked,
 * skipping locked ones, and checked again once locked. The walk reads at most CLAIM_WALK heads,
 * going on after the (target, priority) where this worker's previous walk ended ($12, $13; the
 * executor keeps it from the row with no job that reports it) and wrapping round once: walking all
 * of them cost 22 ms a claim with 2,000 targets waiting and 130 ms with 20,000, and claims run each
 * time a slot frees. So its cost is bounded (about 3 buffers a head), never the size of one
 * target's backlog nor the number of targets; in this mode due order holds among the heads a walk
 * reads, and the targets take turns.
 *
 * Across a target's priorities at once, `scheduled_at <= now` is only a filter on jobs_claim_idx
 * (priority comes first), so when fewer than the limit are due, the target's retries not yet due
 * are read too: 100,000 of them (a downstream that is down) cost ~700 buffers, 5-10 ms a claim.
 * Tried and not kept: per priority (waitingPriorities), 0.3 ms, but its generic plan took 60-130 ms
 * a claim of 200; the lowest priority's range and the rest's as two locked scans, ~10 buffers, but
 * PostgreSQL then planned every claim again (~1.2 ms) and figure 1 without inline delivery lost
 * ~5 %; a row comparison (priority, scheduled_at) <= (last, now) as the bound, on which PostgreSQL
 * 15 ends a scan by its first column only. (The statement's text stays short before its first
 * mention of the jobs table: pg_stat_activity shows 1 kB of it by default, and tests find a claim
 * waiting on a lock by it.)
 */
function claim(s: string, capped: boolean): string {
  const due = `scheduled_at <= coalesce($5::timestamptz, now())`;
  // The worker's room for a target: its cap less what it holds of it, and no more than lim.
  const room = (t: string, target: string) =>
    `least(${t}.lim, ${t}.per_target - coalesce((select held.n from unnest($10::text[], $11::int[]) as held(target, n) where held.target = ${target}), 0))`;
  const cappedCtes = /* sql */ `
), skipping as (
  select * from targets where target = '*' and per_target is not null
), near as (
  select t.kind, j.id, j.target, j.priority, j.scheduled_at
  from skipping t
  cross join lateral (
    select id, target, priority, scheduled_at from ${s}.jobs
    where ${WAITING_STATE} and kind in ('webhook', 'forward') and kind = t.kind and ${due}
    order by priority, scheduled_at, id
    limit ${CLAIM_LOOKAHEAD}
  ) j
), near_open as (
  select n.kind, n.id, n.target, n.priority, n.scheduled_at
  from (
    select n.*, row_number() over (partition by n.kind, n.target order by n.priority, n.scheduled_at, n.id) as nth
    from near n where n.target <> all($9::text[])
  ) n
  join skipping t on t.kind = n.kind
  where n.nth <= ${room('t', 'n.target')}
), walk as (
  select t.kind, t.lim, t.per_target, t.walk_target, t.walk_priority from skipping t
  where (select count(*) from near n where n.kind = t.kind) >= ${CLAIM_LOOKAHEAD}
    and (select count(*) from near_open n where n.kind = t.kind) < t.lim
), waiting(kind, target, priority, scheduled_at, id, step, wrapped, walk_target, walk_priority) as (
  -- The first (target, priority) after where this worker's last walk ended, or, past the last
  -- one, the first of all.
  select w.kind, f.target, f.priority, f.scheduled_at, f.id, 1, f.wrapped, w.walk_target, w.walk_priority
  from walk w
  left join lateral (
    (select target, priority, scheduled_at, id, false as wrapped from ${s}.jobs
     where ${WAITING_STATE} and kind = w.kind and (target, priority) > (w.walk_target, w.walk_priority)
     order by kind, target, priority, scheduled_at, id
     limit 1)
    union all
    (select target, priority, scheduled_at, id, true from ${s}.jobs
     where ${WAITING_STATE} and kind = w.kind and (target, priority) <= (w.walk_target, w.walk_priority)
     order by kind, target, priority, scheduled_at, id
     limit 1)
    limit 1
  ) f on true
  union all
  -- The next one, wrapping round once, for at most ${CLAIM_WALK} in all.
  select w.kind, f.target, f.priority, f.scheduled_at, f.id, w.step + 1, f.wrapped, w.walk_target, w.walk_priority
  from waiting w
  left join lateral (
    (select target, priority, scheduled_at, id, w.wrapped as wrapped from ${s}.jobs
     where ${WAITING_STATE} and kind = w.kind and (target, priority) > (w.target, w.priority)
       and (not w.wrapped or (target, priority) <= (w.walk_target, w.walk_priority))
     order by kind, target, priority, scheduled_at, id
     limit 1)
    union all
    (select target, priority, scheduled_at, id, true from ${s}.jobs
     where ${WAITING_STATE} and kind = w.kind and not w.wrapped and (target, priority) <= (w.walk_target, w.walk_priority)
     order by kind, target, priority, scheduled_at, id
     limit 1)
    limit 1
  ) f on true
  where w.target is not null and w.step < ${CLAIM_WALK}
), walked as (
  -- Where this walk ended, for the next one to go on from (the executor keeps it), and how many
  -- heads it read: fewer than ${CLAIM_WALK}, it came round to where it started.
  select distinct on (kind) kind, target, priority, step from waiting
  where target is not null
  order by kind, step desc
), first_heads as (
  select h.*, ${room('w', 'h.target')} as room
  from (
    select h.*, row_number() over (partition by h.kind order by h.priority, h.scheduled_at, h.id) as rank
    from waiting h
    where h.target is not null and h.target <> all($9::text[])
      and h.scheduled_at <= coalesce($5::timestamptz, now())
  ) h
  join walk w on w.kind = h.kind
  where h.rank <= w.lim
), candidates as (
  -- What the lookahead found open, and what the walk found: a walk reads only some of the
  -- targets, so the jobs the lookahead already holds in hand are kept. Each target to its room.
  select c.kind, c.id
  from (
    select u.*, row_number() over (partition by u.kind, u.target order by u.priority, u.scheduled_at, u.id) as nth
    from (
      select kind, id, target, priority, scheduled_at from near_open
      union
      select h.kind, j.id, h.target, h.priority, j.scheduled_at
      from first_heads h
      cross join lateral (
        select id, scheduled_at from ${s}.jobs
        where ${WAITING_STATE} and kind = h.kind and target = h.target and priority = h.priority and ${due}
        order by scheduled_at, id
        limit greatest(0, h.room)
      ) j
    ) u
  ) c
  join skipping t on t.kind = c.kind
  where c.nth <= ${room('t', 'c.target')}`;
  const cappedArm = /* sql */ `
  union all
  -- Target '*' with some targets at their cap: the candidates, locked in due order.
  select j.id, j.priority, j.scheduled_at, t.lease_ms
  from skipping t
  cross join lateral (
    select id, priority, scheduled_at from ${s}.jobs
    where id = any(array(select c.id from candidates c where c.kind = t.kind)) and ${WAITING_STATE} and ${due}
    order by priority, scheduled_at, id
    limit t.lim
    for update skip locked
  ) j`;
  return /* sql */ `
with ${capped ? 'recursive ' : ''}targets as (
  select * from unnest($1::text[], $2::text[], $3::int[], $7::int[], $8::int[]${capped ? ', $12::text[], $13::smallint[]' : ''})
    as t(kind, target, lim, lease_ms, per_target${capped ? ', walk_target, walk_priority' : ''})
${capped ? cappedCtes : ''}
), picked as (
  select j.id, j.priority, j.scheduled_at, t.lease_ms
  from (select * from targets where target <> '*') t
  cross join lateral (
    select id, priority, scheduled_at from ${s}.jobs
    where ${WAITING_STATE}
      and kind = t.kind and target = t.target
      and ${due}
    order by priority, scheduled_at, id
    limit t.lim
    for update skip locked
  ) j
  union all
  -- Target '*': any target of that kind (webhooks to every endpoint), read through
  -- jobs_claim_any_idx instead of one probe per endpoint.
  select j.id, j.priority, j.scheduled_at, t.lease_ms
  from (select * from targets where target = '*'${capped ? ' and per_target is null' : ''}) t
  cross join lateral (
    select c.id, c.priority, c.scheduled_at
    from (
      select c.*, row_number() over (partition by c.target order by c.priority, c.scheduled_at, c.id) as nth
      from (
        select id, priority, scheduled_at, target from ${s}.jobs
        where ${WAITING_STATE} and kind in ('webhook', 'forward')
          and kind = t.kind
          and ${due}
          and (t.per_target is null or target <> all($9::text[]))
        order by priority, scheduled_at, id
        limit t.lim
        for update skip locked
      ) c
    ) c
    left join unnest($10::text[], $11::int[]) as h(target, n) on h.target = c.target
    where t.per_target is null or c.nth <= t.per_target - coalesce(h.n, 0)
  ) j${capped ? cappedArm : ''}
  order by priority, scheduled_at, id
  limit $4
), claimed as (
  update ${s}.jobs j
  set state = 'running',
      attempt = j.attempt + 1,
      attempted_at = coalesce($5::timestamptz, now()),
      attempted_by = $6,
      lease_ms = picked.lease_ms,
      lease_expires_at = coalesce($5::timestamptz, now()) + picked.lease_ms * interval '1 millisecond'
  from picked
  where j.id = picked.id
  returning j.id, j.event_id, j.kind, j.target, j.attempt, j.max_attempts, j.coalesced, j.priority, j.scheduled_at
)
-- created_at as epoch milliseconds: a float is far cheaper for the client to parse than a timestamp.
-- In the order they were picked: the worker starts them in the order they come back, so a
-- higher-priority job claimed with lower ones runs first.
select c.id::text as id, c.kind, c.target, c.attempt, c.max_attempts, c.coalesced,
       c.event_id::text as event_id, e.type, e.subject, e.payload, e.trace_id, e.span_id, e.trace_flags, e.created_by,
       e.version, (extract(epoch from e.created_at) * 1000)::float8 as created_at_ms, e.id is not null as event_found,
       -- How long the lease has run by now (from now(), the statement's start, lock waits included):
       -- the worker dates the jobs from there, not from the reply nor from a wait for a connection.
       (extract(epoch from clock_timestamp() - now()) * 1000)::float8 as lease_age_ms${capped ? /* sql */ `,
       -- One more row per walk, with no job (id null): where it ended.
       m.kind as walked_kind, m.target as walked_target, m.priority as walked_priority, m.step as walked_steps` : ''}
from claimed c
left join ${s}.events e on e.id = c.event_id${capped ? /* sql */ `
full join walked m on false` : ''}
order by c.priority, c.scheduled_at, c.id`;
}

export function postgresStatements(s: string) {
  // A handed-off or inline job's event, as the executor reads it (fanOutResult): an array, not an
  // object, and created_at as epoch milliseconds. A round sends 200 of them, and with the keys
  // of an object and a timestamp to parse they cost the worker ~1 µs more an event.
  const handedEvent = /* sql */ `json_build_array(c.id::text, c.type, c.subject, c.payload, c.trace_id, c.created_by, c.version,
           (extract(epoch from c.created_at) * 1000)::float8, c.span_id, c.trace_flags)`;
  // With handOff, $6-$10 describe the worker that takes jobs in memory (see offered below);
  // without, the statement has no hand-off part at all, so a round that offers none pays nothing.
  // A queued job's lease_ms is only the fanning side's view (the handlers row, written by whichever
  // process started last; $4 for webhooks): a claim (jobClaim) or a hand-off replaces it with the
  // lease of the worker that takes the job, which is the one its run is timed by.
  //
  // With inline (a hand-off whose targets say inline, $11), the handed-off jobs of inline targets
  // are not inserted at all: each gets a job id from the jobs sequence and comes back to be run by
  // the worker while this statement's transaction stays open. The events are marked fanned and
  // delivered inline to those handlers as if every inline delivery will succeed: the transaction
  // commits only after eventInlineFinish has corrected the events where one did not, and given
  // those jobs their rows. So the common round writes each event once.
  const fanOut = (filter: string, mode: 'plain' | 'handOff' | 'inline') => {
    const handOff = mode !== 'plain';
    const inline = mode === 'inline';
    return /* sql */ `
with claimed as (
  select ctid, id, type, subject, payload, trace_id, span_id, trace_flags, created_by, version, created_at,
         coalesce(subject, id::text) as coalesce_key
  from ${s}.events
  where fanned_out_at is null and poisoned_at is null ${filter}
  order by id
  limit $1
  for update skip locked
), routed as (
  select c.id as event_id, c.coalesce_key, h.name, h.coalesce_subject, h.max_attempts, h.lease_ms, h.priority
  from claimed c
  join ${s}.handlers h on c.type like any (h.like_patterns)
), picked as (
  select event_id, name, max_attempts, lease_ms, priority, 1 as coalesced
  from routed where not coalesce_subject
  union all
  (select distinct on (name, coalesce_key)
     event_id, name, max_attempts, lease_ms, priority,
     (count(*) over (partition by name, coalesce_key))::int as coalesced
   from routed where coalesce_subject
   order by name, coalesce_key, event_id desc)
${handOff ? /* sql */ `), offered as (
  -- Hand-off: the worker of the process running this round has room for up to lim more jobs of
  -- these handlers, each leased for lease_ms ($7, $8, $10; $6 is its id). Offered only where no
  -- job of that handler is waiting due in the queue, so a handed-off job never overtakes an older one.
  select t.target, t.lim, t.lease_ms, ${inline ? 't.inline' : 'false as inline'}
  from unnest($7::text[], $8::int[], $10::int[]${inline ? ', $11::boolean[]' : ''}) as t(target, lim, lease_ms${inline ? ', inline' : ''})
  -- Probes of jobs_claim_idx for this target alone (dueJobWaits): never a join that reads every
  -- due handler job, where another handler's backlog would be read in every round.
  where not ${dueJobWaits(s, `'handler'`, 't.target', 'coalesce($2::timestamptz, now())')}
), ranked as (
  select p.*, o.lease_ms as offered_lease_ms, coalesce(o.inline, false) as offered_inline,
         coalesce(row_number() over (partition by p.name order by p.event_id) <= o.lim, false) as eligible
  from picked p left join offered o on o.target = p.name
), handed as (
  -- At most $9 in all: the higher-priority handlers' first, as a claim takes them, then the oldest events.
  select r.*, r.eligible and count(*) filter (where r.eligible) over (order by r.priority, r.event_id, r.name) <= $9 as mine
  from ranked r
` : /* sql */ `), handed as (
  select p.*, false as mine, false as offered_inline from picked p
`}${inline ? /* sql */ `), inline_jobs as (
  select nextval((select pg_get_serial_sequence('${s}.jobs', 'id'))::regclass) as id, event_id, name as target, max_attempts,
         offered_lease_ms as lease_ms, priority, coalesced
  from handed where mine and offered_inline
), inline_names as materialized (
  -- Per event, the handlers its inline jobs are for, as one jsonb object the update below looks
  -- each event up in: a join of the two CTEs here is planned as a nested loop (their row
  -- estimates are tiny), 200 × 200 rows a round.
  select jsonb_object_agg(event_id::text, names) as m
  from (select event_id, jsonb_agg(target order by target) as names from inline_jobs group by event_id) x
` : ''}), hooks as (
  -- Webhooks: one job per (event, endpoint), never coalesced; nothing for a disabled endpoint,
  -- and a failing endpoint's new deliveries wait $5 ms.
  select c.id as event_id, ep.id::text as endpoint_id, ep.state = 'failing' as failing
  from claimed c
  join ${s}.endpoints ep on ep.state <> 'disabled' and c.type like any (ep.like_patterns)
), inserted as (
  -- A handed-off job is inserted as its worker's claim would leave it: running, attempt 1, leased.
  insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms, priority, coalesced, scheduled_at, held_until,
                         state, attempt, attempted_at, attempted_by, lease_expires_at)
  select event_id, kind, target, max_attempts, lease_ms, priority, coalesced, scheduled_at, held_until,
         case when mine then 'running' else 'available' end,
         case when mine then 1 else 0 end,
         case when mine then scheduled_at end,
         case when mine then ${handOff ? '$6::text' : 'null'} end,
         case when mine then scheduled_at + lease_ms * interval '1 millisecond' end
  from (
    select event_id, 'handler' as kind, name as target, max_attempts,
           ${handOff ? 'case when mine then offered_lease_ms else lease_ms end' : 'lease_ms'} as lease_ms,
           priority, coalesced, coalesce($2::timestamptz, now()) as scheduled_at, null::timestamptz as held_until, mine
    from handed${inline ? ' where not (mine and offered_inline)' : ''}
    union all
    select event_id, 'webhook', endpoint_id, $3::int, $4::int, 0::smallint, 1,
           coalesce($2::timestamptz, now())
             + case when failing then $5::double precision * interval '1 millisecond' else interval '0' end,
           -- Held by the failing delay: the success that ends it brings the delivery back (attemptRecord).
           case when failing then coalesce($2::timestamptz, now()) + $5::double precision * interval '1 millisecond' end,
           false
    from hooks
  ) j
  order by event_id
  returning id, event_id, target, state, attempt, max_attempts, coalesced
), fanned as (
  -- By ctid: the rows are locked by this statement, so their position is stable, and the update
  -- skips a primary-key probe per event (which grows with the history the table holds). As
  -- \`= any\` of an array, a TID scan whatever the estimates: joined with the claimed rows, a
  -- generic plan (which takes the unknown limit for a tenth of the table) was a hash join over a
  -- scan of every event once the table was analyzed; and even as a nested loop of TID probes the
  -- join took ~1 ms a round more than this (200 events, with and without statistics).
  update ${s}.events e
  set fanned_out_at = coalesce($2::timestamptz, now())${inline ? /* sql */ `,
      delivered_inline = (select case when n.m ? e.id::text then array(select jsonb_array_elements_text(n.m -> e.id::text)) end
                          from inline_names n)` : ''}
  where e.ctid = any (array(select ctid from claimed))
  returning e.id
)
-- The ids as one comma-separated text: cheaper to split than a text[] to parse (200 per round).
select (select string_agg(id::text, ',' order by id) from fanned) as event_ids,${inline ? /* sql */ `
       -- Inline jobs as [id, event_id, target, coalesced]; what is the same for all jobs of a
       -- handler (max_attempts, lease_ms, priority) once per handler, in inline_targets.
       (select coalesce(json_agg(json_build_array(j.id::text, j.event_id, j.target, j.coalesced) order by j.id), '[]'::json)
        from inline_jobs j) as inline_jobs,
       (select json_object_agg(t.target, json_build_array(t.max_attempts, t.lease_ms, t.priority))
        from (select distinct target, max_attempts, lease_ms, priority from inline_jobs) t) as inline_targets,
       -- The round's transaction waits for the worker: should this process freeze, the server
       -- ends it after $12 ms idle, and the events go to another process.
       (select set_config('idle_in_transaction_session_timeout', $12::text, true)) as idle_limit,` : ''}
       (select count(*) from inserted)::int as jobs,${mode === 'handOff' ? /* sql */ `
       -- How long the handed-off jobs' lease has run by now (from now(), the statement's start):
       -- the worker dates them from there (a statement that waited on a lock hands over older jobs).
       (extract(epoch from clock_timestamp() - now()) * 1000)::float8 as lease_age_ms,` : ''}
       -- Jobs and their events as two lists the executor joins by event_id: a join here is planned
       -- as a nested loop over the two CTEs (their row estimates are 1), which cost more than the
       -- rest of the statement at 200 rows.
       (select coalesce(json_agg(json_build_object(
           'id', i.id::text, 'target', i.target, 'attempt', i.attempt, 'max_attempts', i.max_attempts,
           'coalesced', i.coalesced, 'event_id', i.event_id::text) order by i.id), '[]'::json)
        from inserted i where i.state = 'running') as handed_off,
       (select coalesce(json_agg(${handedEvent}), '[]'::json)
        from claimed c${inline ? ', inline_names n' : ''}
        -- Inline events by a key lookup in inline_names: \`= any\` of their ids would compare every
        -- claimed event with every inline job, 200 × 200 a round.
        where ${inline ? 'coalesce(n.m ? c.id::text, false) or ' : ''}c.id = any (array(select i.event_id from inserted i where i.state = 'running'))) as handed_events`;
  };

  // The common inline round, when every handler its events route to is an inline target of this
  // round with room for them, none coalesces, no webhook endpoint takes them and no job of those
  // handlers waits in the queue: then the round is the claim, one update of the events and the
  // rows that come back, with routing and the checks done once per event type, not per event.
  // Otherwise (lean = false) it changes nothing: its events stay locked by this transaction and
  // the executor runs the full statement (eventFanOutInline) in it, which claims them again.
  // $1 limit, $2 now, $3-$7 the hand-off ($3 targets, $4 room per target, $5 room in all,
  // $6 lease_ms per target, $7 inline per target), $8 the idle limit (as eventFanOutInline's $12).
  const fanOutInlineLean = /* sql */ `
with claimed as materialized (
  select ctid, id, type, subject, payload, trace_id, span_id, trace_flags, created_by, version, created_at
  from ${s}.events
  where fanned_out_at is null and poisoned_at is null
  order by id
  limit $1
  for update skip locked
), types as (
  select type, count(*)::int as n from claimed group by type
), routes as (
  select t.type, t.n, h.name, h.coalesce_subject, h.max_attempts, h.priority, o.lim, o.lease_ms, o.inline
  from types t
  join ${s}.handlers h on t.type like any (h.like_patterns)
  left join unnest($3::text[], $4::int[], $6::int[], $7::boolean[]) as o(target, lim, lease_ms, inline) on o.target = h.name
), verdict as (
  select not exists (select 1 from types t join ${s}.endpoints ep on ep.state <> 'disabled' and t.type like any (ep.like_patterns))
     and not exists (
       select 1 from (select name, sum(n) as n, max(lim) as lim, bool_or(coalesce_subject or inline is not true) as other
                      from routes group by name) r
       where r.other or r.n > r.lim)
     and (select coalesce(sum(n), 0) from routes) <= $5
     -- Probes of jobs_claim_idx per handler (dueJobWaits): as a join, with another handler's
     -- backlog queued, the planner read every due handler job (a sequential scan of the table
     -- past ~50,000 of them) in every round.
     and not exists (
       select 1 from (select distinct name from routes) r
       where ${dueJobWaits(s, `'handler'`, 'r.name', 'coalesce($2::timestamptz, now())')}) as lean
), names as (
  select type, array_agg(name order by name) as names from routes group by type
), fanned as (
  -- By ctid, as eventFanOut's: a TID scan of the claimed rows whatever the plan.
  update ${s}.events e
  set fanned_out_at = coalesce($2::timestamptz, now()), delivered_inline = (select n.names from names n where n.type = e.type)
  where e.ctid = any (array(select ctid from claimed)) and (select lean from verdict)
  returning e.id, e.type
)
-- eventFanOutInline's columns and lean, but the inline jobs as inline_ids and inline_names, and
-- the events fanned out as handed_events and unrouted_ids (not event_ids: 200 ids again).
select (select lean from verdict) as lean,
       -- The events no handler takes (fanned, delivered to none): the others are handed_events.
       (select string_agg(c.id::text, ',' order by c.id) from claimed c
        where (select lean from verdict) and c.type not in (select type from names)) as unrouted_ids,
       -- A job id for each (event, handler) of the round, and each event type's handlers: the
       -- executor gives the ids out in turn to the handed events' deliveries (any order will do:
       -- an id only has to be its job's alone). Not a JSON array per job: 200 of them a round.
       (select string_agg(nextval((select pg_get_serial_sequence('${s}.jobs', 'id'))::regclass)::text, ',')
        from fanned f join routes r on r.type = f.type) as inline_ids,
       (select json_object_agg(type, names) from names where (select lean from verdict)) as inline_names,
       (select json_object_agg(r.name, json_build_array(r.max_attempts, r.lease_ms, r.priority))
        from (select distinct name, max_attempts, lease_ms, priority from routes) r
        where (select lean from verdict)) as inline_targets,
       (select set_config('idle_in_transaction_session_timeout', $8::text, true)) as idle_limit,
       0 as jobs,
       '[]'::json as handed_off,
       (select coalesce(json_agg(${handedEvent} order by c.id), '[]'::json)
        from claimed c
        where (select lean from verdict) and c.type in (select type from names)) as handed_events`;

  return {
    eventInsertOne: /* sql */ `
insert into ${s}.events (id, type, subject, payload, trace_id, created_by, version, span_id, trace_flags)
values ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9)`,

    // Followed by literal value rows, for deferred events sent together with COMMIT.
    eventInsertValuesPrefix: /* sql */ `insert into ${s}.events (id, type, subject, payload, trace_id, created_by, version, span_id, trace_flags) values`,

    eventInsertMany: /* sql */ `
insert into ${s}.events (id, type, subject, payload, trace_id, created_by, version, span_id, trace_flags)
select * from unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::int[], $8::text[], $9::smallint[])`,

    // Before an inline round that follows an empty one: is there an event it could claim? One
    // round trip, where an inline round is three (BEGIN, the statement, COMMIT). It locks what it
    // finds for this statement only, so events another process's open round holds do not count.
    eventClaimable: /* sql */ `
select exists (
  select 1 from ${s}.events
  where fanned_out_at is null and poisoned_at is null
  limit 1
  for update skip locked
) as claimable`,

    eventFanOut: fanOut('', 'plain'),
    eventFanOutHandOff: fanOut('', 'handOff'),
    eventFanOutInline: fanOut('', 'inline'),
    eventFanOutInlineLean: fanOutInlineLean,
    eventFanOutOne: fanOut('and id = $6::uuid', 'plain'),

    // The end of an inline round whose deliveries did not all succeed, in its transaction: each
    // event of such a delivery gets the handlers that did receive it ($2: names joined by chr(31);
    // '' for none), and each such delivery its job row (failed: retryable or discarded with its
    // error; not finished in time: running, claimed by this worker, $4; not started: available).
    eventInlineFinish: /* sql */ `
with corrected as (
  update ${s}.events e
  set delivered_inline = case when d.handlers = '' then null else string_to_array(d.handlers, chr(31)) end
  from unnest($1::uuid[], $2::text[]) as d(id, handlers)
  where e.id = d.id
  returning 1
), converted as (
  insert into ${s}.jobs (id, event_id, kind, target, state, attempt, max_attempts, priority, coalesced, lease_ms,
                         scheduled_at, attempted_at, attempted_by, finalized_at, lease_expires_at, errors)
  overriding system value
  -- A retry is due retry_in_ms after this statement (the failure's delay less its age), a discard
  -- final now: statement_timestamp(), not now(), which is the round's BEGIN, up to inlineMs
  -- earlier. The attempt and a running job's lease count from the round's start, as the worker does.
  select j.id, j.event_id, 'handler', j.target, j.state, j.attempt, j.max_attempts, j.priority, j.coalesced, j.lease_ms,
         coalesce(j.scheduled_at, coalesce($5::timestamptz, statement_timestamp()) + coalesce(j.retry_in_ms, 0) * interval '1 millisecond'),
         case when j.attempt > 0 then coalesce($5::timestamptz, now()) end,
         case when j.attempt > 0 then $4::text end,
         case when j.state = 'discarded' then coalesce($5::timestamptz, statement_timestamp()) end,
         case when j.state = 'running' then coalesce($5::timestamptz, now()) + j.lease_ms * interval '1 millisecond' end,
         case when j.error is null then '[]'::jsonb else jsonb_build_array(${datedError('j.error', 'j.error_age_ms')}) end
  from json_to_recordset($3::json) as j(id bigint, event_id uuid, target text, state text, attempt int, max_attempts int,
                                         priority smallint, coalesced int, lease_ms int, scheduled_at timestamptz,
                                         retry_in_ms double precision, error jsonb, error_age_ms double precision)
  returning id, state, scheduled_at
)
select (select count(*) from corrected)::int as corrected, (select count(*) from converted)::int as converted,
       (select json_object_agg(id::text, scheduled_at) from converted where state = 'retryable') as retry_at`,

    eventListUnfanned: /* sql */ `
select id::text as id from ${s}.events e
where fanned_out_at is null and poisoned_at is null
order by e.id limit $1`,

    eventRecordFanFailure: /* sql */ `
update ${s}.events
set fan_attempts = fan_attempts + 1,
    last_error = $2,
    poisoned_at = case when fan_attempts + 1 >= $3 then coalesce($4::timestamptz, now()) end
where id = $1::uuid and fanned_out_at is null and poisoned_at is null
returning poisoned_at is not null as poisoned`,

    eventRequeueByIds: /* sql */ `
update ${s}.events set poisoned_at = null, fan_attempts = 0, last_error = null
where id = any($1::uuid[]) and poisoned_at is not null
returning id::text as id`,

    // "Requeue every poisoned event", one batch per statement: the next $3 by (poisoned_at, id)
    // after the cursor ($1, $2), a range of events_poisoned_idx. A row requeued leaves the index;
    // one poisoned again meanwhile sorts after the cursor and may be taken again by the same call.
    eventRequeuePoisoned: /* sql */ `
with batch as materialized (
  select id, poisoned_at from ${s}.events
  where poisoned_at is not null and poisoned_at >= $1::timestamptz and (poisoned_at, id) > ($1::timestamptz, $2::uuid)
  order by poisoned_at, id
  limit $3
), requeued as (
  update ${s}.events e set poisoned_at = null, fan_attempts = 0, last_error = null
  from batch b
  where e.id = b.id and e.poisoned_at is not null
  returning e.id
)
select (select coalesce(array_agg(id::text), '{}') from requeued) as ids, (select count(*)::int from batch) as n,
       (select array[poisoned_at::text, id::text] from batch order by poisoned_at desc, id desc limit 1) as last`,

    // Rows this very transaction inserted, its savepoints included. A row written inside a
    // savepoint (an ORM's nested transaction) carries the savepoint's own transaction id, which is
    // newer than the transaction's: a row whose xmin is the transaction's or up to 2^31 newer
    // (xmin is the 64-bit id modulo 2^32) is ours while that id is still in progress, where
    // another transaction's row visible to us has committed. Only xmin equal to the transaction's
    // id was taken: events recorded in a savepoint were missing from recordedIn/expectRecorded.
    eventListInCurrentTransaction: /* sql */ `
with me as (select pg_current_xact_id()::text::bigint as xid)
select id::text as id, type, subject, payload, trace_id, created_by, version, created_at,
       fanned_out_at, fan_attempts, poisoned_at, last_error, delivered_inline
from ${s}.events e, me, lateral (select (xmin::text::bigint - me.xid % 4294967296 + 4294967296) % 4294967296 as newer_by) d
where case when d.newer_by < 2147483648 then pg_xact_status((me.xid + d.newer_by)::text::xid8) = 'in progress' else false end
order by e.id`,

    eventGet: /* sql */ `
select id::text as id, type, subject, payload, trace_id, created_by, version, created_at,
       fanned_out_at, fan_attempts, poisoned_at, last_error, delivered_inline
from ${s}.events where id = $1::uuid`,

    handlerUpsertMany: /* sql */ `
insert into ${s}.handlers (name, patterns, like_patterns, coalesce_subject, max_attempts, lease_ms, priority, updated_at)
select d.name, string_to_array(d.patterns, chr(31)), string_to_array(d.like_patterns, chr(31)),
       d.coalesce_subject, d.max_attempts, d.lease_ms, d.priority, now()
from unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::int[], $6::int[], $7::int[])
  as d(name, patterns, like_patterns, coalesce_subject, max_attempts, lease_ms, priority)
on conflict (name) do update set
  patterns = excluded.patterns, like_patterns = excluded.like_patterns,
  coalesce_subject = excluded.coalesce_subject, max_attempts = excluded.max_attempts,
  lease_ms = excluded.lease_ms, priority = excluded.priority, updated_at = excluded.updated_at
where (${s}.handlers.patterns, ${s}.handlers.coalesce_subject, ${s}.handlers.max_attempts,
       ${s}.handlers.lease_ms, ${s}.handlers.priority)
  is distinct from (excluded.patterns, excluded.coalesce_subject, excluded.max_attempts,
       excluded.lease_ms, excluded.priority)`,

    // Each target carries the claiming worker's own lease ($7): it knows how long it lets a run
    // take, the jobs row (written by whichever process fanned the job out) does not.
    //
    // A '*' target may cap how many jobs of one target the worker holds ($8, per target; null: no
    // cap; ClaimTarget.perTarget); $9 lists the targets already at their cap, $10/$11 the others it
    // holds jobs of and how many. A job over the cap stays as it was: not claimed, no attempt
    // counted. Without the cap, one slow endpoint's due backlog took every webhook slot a claim
    // offered, and the other endpoints' deliveries waited behind it. With none at its cap (the
    // common case) the claim is jobClaim; with some, jobClaimCapped (see claim above).
    jobClaim: claim(s, false),
    jobClaimCapped: claim(s, true),

    jobCompleteMany: /* sql */ `
${runningBatch('unnest($1::bigint[], $2::int[]) as d(id, attempt)')}
update ${s}.jobs j
set state = 'completed', finalized_at = coalesce($3::timestamptz, now()), lease_expires_at = null
from d
where j.id = d.id and j.attempt = d.attempt and j.state = d.running`,

    // A transactional handler's completion, in its transaction: only while that transaction still
    // holds the consume record written before the handler ran. A handler that ended it (ROLLBACK)
    // took the record and its effect with it, and this then runs outside any transaction: the job
    // must not be completed. $1 id, $2 attempt, $3 now, $4 event id, $5 handler.
    jobCompleteConsumed: /* sql */ `
${runningBatch('(select $1::bigint as id, $2::int as attempt) d')},
consumed as (select exists (select 1 from ${s}.consumes where event_id = $4::uuid and handler = $5) as yes),
done as (
  update ${s}.jobs j
  set state = 'completed', finalized_at = coalesce($3::timestamptz, now()), lease_expires_at = null
  from d
  where j.id = d.id and j.attempt = d.attempt and j.state = d.running and (select yes from consumed)
  returning 1
)
select (select yes from consumed) as consumed, (select count(*)::int from done) as completed`,

    jobReleaseMany: /* sql */ `
${runningBatch('unnest($1::bigint[], $2::int[]) as d(id, attempt)')}
update ${s}.jobs j
set state = case when j.attempt - 1 = 0 then 'available' else 'retryable' end,
    attempt = j.attempt - 1, lease_expires_at = null, attempted_by = null
from d
where j.id = d.id and j.attempt = d.attempt and j.state = d.running
returning j.id::text as id`,

    // refund: the attempt does not count (a shutdown cut it short), so the job keeps all its tries.
    // A retry is due at the injected clock's time (scheduled_at), or retry_in_ms after now(): the
    // clock the claim compares scheduled_at with, not the application host's. The error entry is
    // dated by the same clock, error_age_ms before now() (see datedError).
    jobFailMany: /* sql */ `
${runningBatch(`unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[], $5::jsonb[], $7::boolean[], $8::double precision[], $9::double precision[])
  as d(id, attempt, state, scheduled_at, error, refund, retry_in_ms, error_age_ms)`)}
update ${s}.jobs j
set state = d.state,
    attempt = j.attempt - case when d.refund then 1 else 0 end,
    scheduled_at = coalesce(d.scheduled_at, coalesce($6::timestamptz, now()) + d.retry_in_ms * interval '1 millisecond', j.scheduled_at),
    finalized_at = case when d.state = 'discarded' then coalesce($6::timestamptz, now()) end,
    lease_expires_at = null,
    errors = j.errors || jsonb_build_array(${datedError('d.error', 'd.error_age_ms')})
from d
where j.id = d.id and j.attempt = d.attempt and j.state = d.running
returning j.id::text as id, j.scheduled_at`,

    jobRescue: /* sql */ `
with stuck as (
  select id from ${s}.jobs
  where state = 'running' and lease_expires_at < coalesce($2::timestamptz, now())
  order by lease_expires_at
  limit $1
  for update skip locked
)
update ${s}.jobs j
set state = case when j.attempt >= j.max_attempts then 'discarded' else 'retryable' end,
    scheduled_at = coalesce($2::timestamptz, now()),
    finalized_at = case when j.attempt >= j.max_attempts then coalesce($2::timestamptz, now()) end,
    lease_expires_at = null,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
      'at', ${isoTime('coalesce($2::timestamptz, now())')}, 'attempt', j.attempt, 'name', 'LeaseExpired',
      'message', 'lease expired: the worker stopped (crash, kill or lost connection) before finishing'))
from stuck
where j.id = stuck.id
returning j.state`,

    // j.id, the bigint: a bare `order by id` is the text output column, which put job 10 before 9.
    jobListForEvent: /* sql */ `
select id::text as id, event_id::text as event_id, kind, target, state, attempt, max_attempts, priority,
       coalesced, scheduled_at, attempted_at, finalized_at, lease_expires_at, created_at, errors
from ${s}.jobs j where event_id = $1::uuid order by j.id`,

    consumeInsert: /* sql */ `
insert into ${s}.consumes (event_id, handler) values ($1::uuid, $2)
on conflict do nothing
returning 1`,

    // The same, first in a transactional handler's transaction on PostgreSQL, bounding it on the
    // server: $3 idle_in_transaction_session_timeout, so the transaction of a worker that froze or
    // lost its network (its backend idle in transaction, holding this row's lock) ends within the
    // job's lease instead of when TCP gives up, hours later, while every new attempt of the job
    // waits on that lock; $4 lock_timeout, so a wait on the lock of another attempt of this job
    // (or any lock the handler's statements meet) ends at the handler's timeout, which the
    // worker's own timer cannot cut short while a statement runs. Both are local to the transaction.
    consumeInsertBounded: /* sql */ `
insert into ${s}.consumes (event_id, handler)
select $1::uuid, $2
from (select set_config('idle_in_transaction_session_timeout', $3::text, true),
             set_config('lock_timeout', $4::text, true)) as bounds
on conflict do nothing
returning 1`,

    leaderAttemptElect: /* sql */ `
insert into ${s}.leader as l (name, leader_id, elected_at, expires_at)
values ('default', $1, coalesce($3::timestamptz, now()), coalesce($3::timestamptz, now()) + $2 * interval '1 millisecond')
on conflict (name) do update set
  leader_id = excluded.leader_id,
  elected_at = case when l.leader_id = excluded.leader_id then l.elected_at else excluded.elected_at end,
  expires_at = excluded.expires_at
where l.leader_id = excluded.leader_id or l.expires_at < excluded.elected_at
returning leader_id`,

    // Ended, not deleted: a follower may take it at once (its election sees an expired lease),
    // while /healthz, reading a lease that ended a moment ago, still sees a leader.
    leaderResign: /* sql */ `
update ${s}.leader set expires_at = least(expires_at, coalesce($2::timestamptz, now()))
where name = 'default' and leader_id = $1`,


    notify: /* sql */ `select pg_notify($1, $2)`,

    backendPid: /* sql */ `select pg_backend_pid() as pid`,
  };
}

export type PostgresStatements = ReturnType<typeof postgresStatements>;

/**
 * A wake-up on rea's own LISTEN or wake-up connection, as one simple-protocol query (the values
 * are escaped literals). A NOTIFY takes a transaction id, so it commits with a WAL record of its
 * own and, under synchronous_commit, waits for a WAL flush like a business commit. A wake-up lost
 * in a crash costs nothing (the relays poll), so it need not wait. SET LOCAL, not SET: behind a
 * transaction pooler a session setting would outlive this transaction on a server connection
 * that business transactions use next.
 */
export const wakeupNotify = (channelLiteral: string, payloadLiteral: string) =>
  /* sql */ `begin; set local synchronous_commit = off; select pg_notify(${channelLiteral}, ${payloadLiteral}); commit`;

export const migrationStatements = {
  lock: /* sql */ `select pg_advisory_xact_lock(hashtext('rea.migrate:' || $1))`,
  createSchema: (s: string) => /* sql */ `create schema if not exists ${s}`,
  createTable: (s: string) => /* sql */ `
create table if not exists ${s}.migrations (
  version    integer primary key,
  name       text not null,
  applied_at timestamptz not null default now()
)`,
  // breaking: a column a later rea adds (as to_jsonb reads it, absent is false) to mark a
  // migration that an older rea must not run against; see newerMigrations.
  applied: (s: string) => /* sql */ `
select version, coalesce((to_jsonb(t) ->> 'breaking')::boolean, false) as breaking
from ${s}.migrations t order by version`,
  insert: (s: string) => /* sql */ `insert into ${s}.migrations (version, name) values ($1, $2)`,
  // Taken once the advisory lock is held (lock_timeout bounds that wait too, and a migrator queued
  // behind another's long migration must not give up): a migration's ALTER waits in the lock queue,
  // and every insert into that table (each record(), each business commit) waits behind it.
  lockTimeout: (ms: number) => /* sql */ `set local lock_timeout = ${Math.trunc(ms)}`,
  // The oldest transactions holding a lock on a table of the schema: what a migration waited for.
  // No query text: it may hold an application's data.
  lockHolders: /* sql */ `
select a.pid, coalesce(nullif(a.application_name, ''), '?') as application_name, coalesce(a.state, '?') as state,
       floor(extract(epoch from now() - a.xact_start))::int as xact_seconds
from pg_locks l
join pg_class c on c.oid = l.relation
join pg_namespace n on n.oid = c.relnamespace
join pg_stat_activity a on a.pid = l.pid
where n.nspname = $1 and l.granted and l.pid <> pg_backend_pid() and a.xact_start is not null
group by a.pid, a.application_name, a.state, a.xact_start
order by a.xact_start
limit 3`,
};
