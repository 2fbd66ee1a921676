// The rules that decide whether a chaos run (npm run chaos, in CI with --short) passes.
import { describe, expect, it } from 'vitest';
import { type ChaosSummary, FAILOVER_RECOVERY_MAX_MS, FAILOVER_STAGES, failures, LEAN_INLINE_MIN } from './chaos/verdict.js';

function clean(): ChaosSummary {
  return {
    lost: 0, duplicateEffects: 0, stuckJobs: 0, discardedJobs: 0, workerCrashes: 0, workersHungAtStop: 0,
    lean: { lost: 0, deliveredInline: 900, inlineBeforeRestart: 300, inlineAfterRestart: 600, stuckJobs: 0, discardedJobs: 0 },
    webhooks: { stored: 700, lost: 0, rejected: 0 },
    longTransaction: { committed: 50, undelivered: 0 },
    failover: { silenced: 14, resumedMs: { 'relay round': 3400, 'lean relay round': 3200, 'claim and completion': 4400, 'plain handler\'s write': 3500 } },
  };
}

describe('chaos verdict', () => {
  it('passes a run with nothing lost, applied twice, stuck, discarded or crashed, and the lean path on both sides of the restart', () => {
    expect(failures(clean())).toEqual([]);
  });

  it('fails on each kind of damage, naming it with its count', () => {
    const s = clean();
    s.lost = 3;
    s.duplicateEffects = 2;
    s.stuckJobs = 1;
    s.lean.stuckJobs = 4;
    s.discardedJobs = 5;
    s.lean.lost = 6;
    s.workerCrashes = 2;
    s.workersHungAtStop = 1;
    expect(failures(s)).toEqual([
      '3 events lost',
      '2 duplicate transactional effects',
      '5 jobs stuck',
      '5 jobs discarded',
      '6 lean events lost',
      '2 workers crashed',
      '1 workers did not stop on SIGTERM',
    ]);
  });

  it('a worker that exited on its own, or did not exit on SIGTERM, fails the run even when every event was delivered', () => {
    expect(failures({ ...clean(), workerCrashes: 1 })).toEqual(['1 workers crashed']);
    expect(failures({ ...clean(), workersHungAtStop: 1 })).toEqual(['1 workers did not stop on SIGTERM']);
  });

  it('the failover must have been staged, and each stage of delivery must run again within FAILOVER_RECOVERY_MAX_MS of it', () => {
    const resumed = (changes: Partial<ChaosSummary['failover']['resumedMs']>) => ({ ...clean().failover.resumedMs, ...changes });
    expect(failures({ ...clean(), failover: { silenced: 0, resumedMs: resumed({}) } })).toEqual(['the failover silenced no worker connection: it was not staged']);
    for (const stage of FAILOVER_STAGES) {
      expect(failures({ ...clean(), failover: { silenced: 9, resumedMs: resumed({ [stage]: null }) } })).toEqual([`no ${stage} after the failover`]);
      expect(failures({ ...clean(), failover: { silenced: 9, resumedMs: resumed({ [stage]: FAILOVER_RECOVERY_MAX_MS + 1 }) } }))
        .toEqual([`the first ${stage} came ${FAILOVER_RECOVERY_MAX_MS + 1} ms after the failover (at most ${FAILOVER_RECOVERY_MAX_MS} expected)`]);
      expect(failures({ ...clean(), failover: { silenced: 9, resumedMs: resumed({ [stage]: FAILOVER_RECOVERY_MAX_MS }) } })).toEqual([]);
    }
    // Two stages late are two reasons.
    expect(failures({ ...clean(), failover: { silenced: 9, resumedMs: resumed({ 'relay round': null, 'claim and completion': 25_000 }) } })).toEqual([
      'no relay round after the failover',
      `the first claim and completion came 25000 ms after the failover (at most ${FAILOVER_RECOVERY_MAX_MS} expected)`,
    ]);
  });

  it('every event of the webhook\'s type must reach the receiver, each delivery signed, and some must have been recorded', () => {
    expect(failures({ ...clean(), webhooks: { stored: 700, lost: 2, rejected: 0 } })).toEqual(['2 webhook events never delivered']);
    expect(failures({ ...clean(), webhooks: { stored: 700, lost: 0, rejected: 1 } })).toEqual(['1 webhook deliveries with a bad signature']);
    expect(failures({ ...clean(), webhooks: { stored: 0, lost: 0, rejected: 0 } }))
      .toEqual(['no event of the webhook\'s type was stored: the run did not test webhook deliveries']);
    expect(failures({ ...clean(), webhooks: { stored: 1, lost: 0, rejected: 0 } })).toEqual([]);
  });

  it('the long transaction must have committed its events, and each of them must have been delivered', () => {
    expect(failures({ ...clean(), longTransaction: { committed: 0, undelivered: 0 } }))
      .toEqual(['the long transaction committed no events: the run did not test events that become visible late']);
    expect(failures({ ...clean(), longTransaction: { committed: 50, undelivered: 3 } })).toEqual(['3 events of the long transaction not delivered']);
    expect(failures({ ...clean(), longTransaction: { committed: 1, undelivered: 0 } })).toEqual([]);
  });

  it('with a restart, the lean path must have delivered inline on each side of it', () => {
    const before = clean();
    before.lean.inlineBeforeRestart = LEAN_INLINE_MIN - 1;
    expect(failures(before)).toEqual([`only ${LEAN_INLINE_MIN - 1} lean deliveries were inline before the PostgreSQL restart (at least ${LEAN_INLINE_MIN} expected)`]);
    const after = clean();
    after.lean.inlineAfterRestart = 0;
    expect(failures(after)).toEqual([`only 0 lean deliveries were inline after the PostgreSQL restart (at least ${LEAN_INLINE_MIN} expected)`]);
    const exactly = clean();
    exactly.lean.inlineBeforeRestart = LEAN_INLINE_MIN;
    exactly.lean.inlineAfterRestart = LEAN_INLINE_MIN;
    expect(failures(exactly)).toEqual([]);
  });

  it('without a restart (--no-restart), the lean path counts in all', () => {
    const s = clean();
    s.lean.inlineBeforeRestart = null;
    s.lean.inlineAfterRestart = null;
    s.lean.deliveredInline = LEAN_INLINE_MIN;
    expect(failures(s)).toEqual([]);
    s.lean.deliveredInline = LEAN_INLINE_MIN - 1;
    expect(failures(s)).toEqual([`only ${LEAN_INLINE_MIN - 1} lean deliveries were inline (at least ${LEAN_INLINE_MIN} expected): the run did not exercise the lean path`]);
  });
});
