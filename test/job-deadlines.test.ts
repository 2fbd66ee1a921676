import { afterEach, describe, expect, it, vi } from 'vitest';
import { Deadlines } from '../src/worker/deadlines.js';

// The worker's job timeouts: one timer per timeout value (src/worker/deadlines.ts). The clock is
// faked (setTimeout and performance.now together), so each test says exactly when a deadline is due.
describe('job deadlines', () => {
  afterEach(() => {
    vi.useRealTimers();
  });
  const fake = () => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });

  it('each deadline fires once its own time has passed, in order, whatever its timeout', async () => {
    fake();
    const d = new Deadlines();
    const fired: string[] = [];
    d.add(300, () => fired.push('a300'));
    d.add(100, () => fired.push('b100'));
    await vi.advanceTimersByTimeAsync(50);
    d.add(100, () => fired.push('c100')); // due at 150
    d.add(300, () => fired.push('d300')); // due at 350
    await vi.advanceTimersByTimeAsync(49);
    expect(fired).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(fired).toEqual(['b100']);
    await vi.advanceTimersByTimeAsync(49);
    expect(fired).toEqual(['b100']);
    await vi.advanceTimersByTimeAsync(1);
    expect(fired).toEqual(['b100', 'c100']);
    await vi.advanceTimersByTimeAsync(150);
    expect(fired).toEqual(['b100', 'c100', 'a300']);
    await vi.advanceTimersByTimeAsync(50);
    expect(fired).toEqual(['b100', 'c100', 'a300', 'd300']);
    expect(d.pending).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a cancelled deadline never fires; the one behind it still fires on time', async () => {
    fake();
    const d = new Deadlines();
    const fired: string[] = [];
    const first = d.add(100, () => fired.push('first'));
    await vi.advanceTimersByTimeAsync(30);
    d.add(100, () => fired.push('second')); // due at 130
    d.cancel(first);
    d.cancel(first); // twice is a no-op
    expect(d.pending).toBe(1);
    await vi.advanceTimersByTimeAsync(99);
    expect(fired).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(fired).toEqual(['second']);
    d.cancel(first);
    expect(d.pending).toBe(0);
  });

  it('deadlines counted from a given start (the job\'s) fire that much earlier', async () => {
    fake();
    const d = new Deadlines();
    const fired: number[] = [];
    const started = performance.now();
    await vi.advanceTimersByTimeAsync(40);
    d.add(100, () => fired.push(performance.now() - started), started);
    await vi.advanceTimersByTimeAsync(59);
    expect(fired).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(fired).toEqual([100]);
  });

  it('leaves no timer once every deadline is cancelled, so a stopped worker lets the process exit', () => {
    fake();
    const d = new Deadlines();
    const all = [d.add(30_000, () => undefined), d.add(30_000, () => undefined), d.add(5_000, () => undefined)];
    expect(vi.getTimerCount()).toBe(2); // one per timeout value, not one per deadline
    for (const x of all) d.cancel(x);
    expect(vi.getTimerCount()).toBe(0);
    expect(d.pending).toBe(0);
  });

  it('many short jobs behind one long one: cancelled entries are dropped, and the long one still times out', async () => {
    fake();
    const d = new Deadlines();
    let longFired = 0;
    d.add(1_000, () => longFired++);
    for (let i = 0; i < 10_000; i++) d.cancel(d.add(1_000, () => expect.unreachable('a cancelled deadline fired')));
    expect(d.pending).toBe(1);
    // The queue holds at most twice the live entries and a little slack, not the 10,000.
    expect(d.held).toBeLessThanOrEqual(2 * 1 + 64 + 1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(longFired).toBe(1);
    expect(d.held).toBe(0);
  });

  it('a deadline added while another fires is timed from its own start', async () => {
    fake();
    const d = new Deadlines();
    const fired: string[] = [];
    d.add(100, () => {
      fired.push('a');
      d.add(100, () => fired.push('b')); // started at 100: due at 200
    });
    d.add(150, () => fired.push('c'));
    await vi.advanceTimersByTimeAsync(100);
    expect(fired).toEqual(['a']);
    await vi.advanceTimersByTimeAsync(50);
    expect(fired).toEqual(['a', 'c']);
    await vi.advanceTimersByTimeAsync(49);
    expect(fired).toEqual(['a', 'c']);
    await vi.advanceTimersByTimeAsync(1);
    expect(fired).toEqual(['a', 'c', 'b']);
  });

  it('one deadline that throws does not keep the others due with it from firing; its error is thrown afterwards', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'performance'] });
    const d = new Deadlines();
    const fired: string[] = [];
    d.add(100, () => {
      fired.push('a');
      throw new Error('boom');
    });
    d.add(100, () => fired.push('b'));
    d.add(200, () => fired.push('c'));
    vi.advanceTimersByTime(100);
    expect(fired).toEqual(['a', 'b']);
    // Re-thrown on its own, as a throw from a timer of its own would be: uncaught.
    expect(() => vi.runOnlyPendingTimers()).toThrow('boom');
    vi.advanceTimersByTime(100);
    expect(fired).toEqual(['a', 'b', 'c']);
  });
});
