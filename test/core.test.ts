import { describe, expect, expectTypeOf, it, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents, exponentialBackoff, OptionsError, ReaError, WebhookSecretError, WebhookUrlRefusedError, type ReaErrorCode } from '../src/index.js';
import { describeTargets, testBus } from './helpers/db.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string(), total: z.number().int() }),
  'order.paid': z.object({ orderNo: z.string() }),
  'user.signed_up': z.object({ email: z.string() }),
});

describeTargets('core on $name', (target) => {
  it.skipIf(!target.available)('a committed event runs each subscribed handler exactly once', async () => {
    const bus = await testBus(target, events);
    const seen: string[] = [];
    bus.on('order.created', 'warehouse', async (e) => {
      seen.push(`warehouse:${e.payload.orderNo}`);
    });
    bus.on('order.created', 'mailer', async (e) => {
      seen.push(`mailer:${e.payload.orderNo}`);
    });
    await bus.start();
    const done = Promise.all([
      bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'warehouse'),
      bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'mailer'),
    ]);
    const id = await bus.transaction(async (tx) => bus.record(tx, 'order.created', { orderNo: 'A1', total: 5 }, { subject: 'A1' }));
    await done;
    expect(seen.sort()).toEqual(['mailer:A1', 'warehouse:A1']);
    const jobs = await bus.jobs.forEvent(id);
    expect(jobs.map((j) => [j.target, j.state, j.attempt]).sort()).toEqual([['mailer', 'completed', 1], ['warehouse', 'completed', 1]]);
  });
});

describeTargets('patterns on $name', (target) => {
  it.skipIf(!target.available)("a '*' inside a pattern ('*.paid') is typed as the types it is routed: the handler's event is not `never`", async () => {
    const paid = defineEvents({
      'order.paid': z.object({ orderNo: z.string() }),
      'invoice.paid': z.object({ invoiceNo: z.string() }),
      'order.created': z.object({ orderNo: z.string() }),
    });
    const bus = await testBus(target, paid);
    const seen: string[] = [];
    bus.on('*.paid', 'payments', async (e) => {
      // Before, e was `never` here and this did not compile ("Property 'type' does not exist on type 'never'").
      expectTypeOf(e.type).toEqualTypeOf<'order.paid' | 'invoice.paid'>();
      seen.push(e.type === 'order.paid' ? `order ${e.payload.orderNo}` : `invoice ${e.payload.invoiceNo}`);
    });
    bus.on('order.*d', 'order-d', async (e) => {
      expectTypeOf(e.type).toEqualTypeOf<'order.paid' | 'order.created'>();
    });
    bus.on('*', 'all', async (e) => {
      expectTypeOf(e.type).toEqualTypeOf<'order.paid' | 'invoice.paid' | 'order.created'>();
    });
    await bus.start();
    let completed = 0;
    const done = new Promise<void>((resolve) => bus.lifecycle.on('job:completed', (j) => {
      if (j.handler === 'payments' && ++completed === 2) resolve();
    }));
    await bus.transaction(async (tx) => {
      await bus.record(tx, 'order.paid', { orderNo: 'A1' });
      await bus.record(tx, 'invoice.paid', { invoiceNo: 'I1' });
      await bus.record(tx, 'order.created', { orderNo: 'A2' });
    });
    await done;
    expect(seen.sort()).toEqual(['invoice I1', 'order A1']);
  });
});

describe('default logger', () => {
  it('REA_LOG_LEVEL set to a level pino does not know is an OptionsError that names the variable', async () => {
    const { createBus } = await import('../src/index.js');
    vi.stubEnv('REA_LOG_LEVEL', 'warning');
    try {
      // Before: pino's own Error, "default level:warning must be included in custom levels".
      expect(() => createBus({ database: { pglite: 'memory://' }, events }))
        .toThrow(new OptionsError('REA_LOG_LEVEL', "'warning' is not a log level; one of trace, debug, info, warn, error, fatal, silent"));
      vi.stubEnv('REA_LOG_LEVEL', 'debug');
      expect(() => createBus({ database: { pglite: 'memory://' }, events })).not.toThrow();
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('a logger option that is not a logger (pino\'s options, say) is an OptionsError at createBus, not a TypeError from a timer later', async () => {
    const { createBus } = await import('../src/index.js');
    // Before: accepted, and the first warning (a leader lease, a failed round) threw
    // "this.deps.log.warn is not a function" from a timer, which ended the process.
    expect(() => createBus({ database: { pglite: 'memory://' }, events, logger: { level: 'warn' } as never }))
      .toThrow(new OptionsError('logger', 'takes a pino-compatible logger (an object with debug, info, warn, error, child); this one has no debug, info, warn, error, child: '
        + "for pino's options (a level, say), pass pino(options), or set REA_LOG_LEVEL"));
    expect(() => createBus({ database: { pglite: 'memory://' }, events, logger: 'info' as never }))
      .toThrow(new OptionsError('logger', 'takes a pino-compatible logger (an object with debug, info, warn, error, child), not string'));
    const { pino } = await import('pino');
    expect(() => createBus({ database: { pglite: 'memory://' }, events, logger: pino({ level: 'silent' }) })).not.toThrow();
  });
});

describe('DEFAULTS', () => {
  // webhooks.concurrency was a sentinel 0, which the schema refuses: { ...DEFAULTS.webhooks, timeoutMs }
  // failed with "createBus.webhooks.concurrency: Too small".
  it('every option group of it, spread into createBus, is a valid configuration', async () => {
    const { createBus, DEFAULTS } = await import('../src/index.js');
    const { handler: _handlerOptions, ...busDefaults } = DEFAULTS; // a handler's options go to bus.on, not createBus
    const database = { postgres: 'postgres://nobody@127.0.0.1:1/none' }; // nothing connects until used
    for (const [group, value] of Object.entries(busDefaults)) {
      expect(() => createBus({ database, events, [group]: value }), group).not.toThrow();
    }
    expect(() => createBus({ database, events, ...busDefaults })).not.toThrow();
    expect(() => createBus({ database, events, webhooks: { ...DEFAULTS.webhooks, timeoutMs: 5000 } })).not.toThrow();
    expect(DEFAULTS.webhooks.concurrency).toBe('auto');
    expect(() => createBus({ database, events, webhooks: { concurrency: 0 } }))
      .toThrow("invalid option createBus.webhooks.concurrency: a whole number from 1 to 10000, or 'auto' (half of worker.concurrency, at least 1)");
  });
});

describe('ReaErrorCode', () => {
  it('lists the codes of the webhook errors rea exports, so an application can switch on them', () => {
    // Before, ReaErrorCode lacked both: this switch did not compile ("Type '\"ERR_WEBHOOK_URL_REFUSED\"'
    // is not comparable to type 'ReaErrorCode'"), although create/update throw exactly these.
    const reply = (err: ReaError): string => {
      switch (err.code) {
        case 'ERR_WEBHOOK_URL_REFUSED': return 'bad url';
        case 'ERR_WEBHOOK_SECRET': return 'bad secret';
        default: return 'other';
      }
    };
    expect(reply(new WebhookUrlRefusedError('address', 'resolves to loopback address 127.0.0.1', 'localhost'))).toBe('bad url');
    expect(reply(new WebhookSecretError('too short'))).toBe('bad secret');
    expectTypeOf<'ERR_WEBHOOK_SECRET' | 'ERR_WEBHOOK_URL_REFUSED'>().toMatchTypeOf<ReaErrorCode>();
  });
});

describe('PollLoop', () => {
  it('tells a round whether wake() asked for it or the timer did', async () => {
    const { PollLoop } = await import('../src/core/poll.js');
    const seen: boolean[] = [];
    let wokenRound: () => void = () => {};
    const woke = new Promise<void>((r) => (wokenRound = r));
    const loop = new PollLoop({
      minMs: 5, maxMs: 5,
      round: async ({ woken }) => {
        seen.push(woken);
        if (woken) wokenRound();
        return 'none';
      },
      onError: (err) => { throw err; },
    });
    loop.start();
    while (seen.length < 3) await new Promise((r) => setTimeout(r, 5));
    loop.wake();
    await woke;
    await loop.stop();
    const firstWoken = seen.indexOf(true);
    expect(seen.slice(0, 3)).toEqual([false, false, false]);
    expect(firstWoken).toBeGreaterThanOrEqual(3);
  });

  it('after a failed round, an idle loop tries again within ERROR_RETRY_MS, doubling per failure in a row, not after its idle wait', async () => {
    const { PollLoop, ERROR_RETRY_MS } = await import('../src/core/poll.js');
    vi.useFakeTimers();
    try {
      const rounds: number[] = [];
      let fail = 0;
      const loop = new PollLoop({
        minMs: 1_000, maxMs: 60_000,
        round: async () => {
          rounds.push(Date.now());
          if (fail > 0) {
            fail--;
            throw new Error('connection closed after its deadline');
          }
          return 'none';
        },
        onError: () => {},
      });
      loop.start();
      // Idle: the wait doubles from 1 s to the minute.
      await vi.advanceTimersByTimeAsync(200_000);
      const idle = rounds.at(-1)! - rounds.at(-2)!;
      expect(idle).toBe(60_000);
      // Three failures in a row (the next idle round fails, then its retries).
      fail = 3;
      const at = rounds.length;
      await vi.advanceTimersByTimeAsync(60_000 + ERROR_RETRY_MS * 7);
      const gaps = rounds.slice(at).map((t, i, a) => (i === 0 ? 0 : t - a[i - 1]!)).slice(1);
      // Before: 60 s after a failure (the idle wait, doubled and capped), so one retry a minute.
      expect(gaps.slice(0, 3)).toEqual([ERROR_RETRY_MS, ERROR_RETRY_MS * 2, ERROR_RETRY_MS * 4]);
      await loop.stop();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('throttled wake-ups', () => {
  it('run the first call at once, fold calls inside the window into one at its end, per key', async () => {
    const { throttled } = await import('../src/core/throttle.js');
    vi.useFakeTimers();
    try {
      const calls: [string, number][] = [];
      const t0 = Date.now();
      const wake = throttled(100, (key) => calls.push([key, Date.now() - t0]), () => Date.now());
      wake('e');
      expect(calls).toEqual([['e', 0]]); // an isolated commit is heard without delay
      vi.advanceTimersByTime(10);
      wake('e');
      wake('e');
      wake('j'); // another key has its own window
      expect(calls).toEqual([['e', 0], ['j', 10]]);
      vi.advanceTimersByTime(89);
      expect(calls).toHaveLength(2);
      vi.advanceTimersByTime(1);
      expect(calls).toEqual([['e', 0], ['j', 10], ['e', 100]]);
      vi.advanceTimersByTime(500); // a quiet spell: the next call goes at once again
      wake('e');
      expect(calls.at(-1)).toEqual(['e', 600]);
      wake('e');
      wake.cancel();
      vi.advanceTimersByTime(1000);
      expect(calls).toHaveLength(4);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('exponentialBackoff', () => {
  it('refuses, by name, options that would give a negative or non-numeric delay', () => {
    // Passed before, these gave NaN or negative delays: at every failure the worker logged the
    // schedule as broken and fell back to the default one.
    expect(() => exponentialBackoff({ baseMs: -5 })).toThrow(new OptionsError('exponentialBackoff.baseMs', 'a number of ms ≥ 0, not -5'));
    expect(() => exponentialBackoff({ factor: 0.5 })).toThrow(new OptionsError('exponentialBackoff.factor', 'a number ≥ 1 (1: the same delay every time), not 0.5'));
    expect(() => exponentialBackoff({ jitterMs: Number.NaN })).toThrow(new OptionsError('exponentialBackoff.jitterMs', 'a number of ms ≥ 0, not NaN'));
    expect(() => exponentialBackoff({ maxMs: '60000' as unknown as number })).toThrow(new OptionsError('exponentialBackoff.maxMs', 'a number of ms ≥ 0, not "60000"'));
    expect(() => exponentialBackoff({ random: 0.5 as unknown as () => number })).toThrow(new OptionsError('exponentialBackoff.random', 'a function returning a number in [0, 1)'));
    expect(() => exponentialBackoff({ base: 1000 } as object)).toThrow(new OptionsError('exponentialBackoff.base', 'unknown option; known: baseMs, factor, jitterMs, maxMs, random'));
    const fixed = exponentialBackoff({ baseMs: 1000, factor: 1, jitterMs: 0 });
    expect([1, 2, 3].map(fixed)).toEqual([1000, 1000, 1000]);
    expect(exponentialBackoff({ baseMs: 1000, factor: 2, jitterMs: 0, maxMs: 3000 })(5)).toBe(3000);
  });
});

describe('uuidv7', () => {
  it('keeps ids increasing when the clock steps back a little, and follows it again after a large step back', async () => {
    const { uuidv7, uuidv7Time, MAX_CLOCK_STEP_BACK_MS } = await import('../src/core/uuid.js');
    const t = Date.UTC(2026, 0, 1);
    const a = uuidv7(t);
    const b = uuidv7(t - 5000); // an NTP correction: still after a, dated a's millisecond
    expect(b > a).toBe(true);
    expect(uuidv7Time(b)).toBe(t);
    // One id from a clock a year ahead must not date every later id a year ahead.
    const ahead = uuidv7(t + 365 * 24 * 3600_000);
    const back = uuidv7(t + 1);
    expect(uuidv7Time(ahead)).toBe(t + 365 * 24 * 3600_000);
    expect(uuidv7Time(back)).toBe(t + 1);
    expect(uuidv7Time(uuidv7(t + 2))).toBe(t + 2);
    expect(MAX_CLOCK_STEP_BACK_MS).toBeLessThan(60_000);
  });
});
