// UUIDv7 made in the application: time-ordered ids without a database round trip.
// Within one millisecond a 12-bit counter keeps ids from one process strictly increasing.
import { randomBytesPooled } from './random.js';

let lastMs = -1;
let seq = 0;

/**
 * A clock that steps back at most this far keeps ids increasing (they carry the last time seen
 * until it catches up). Past it, ids follow the clock again: one jump ahead (a VM resumed with a
 * wrong clock, a bad NTP answer) would otherwise date every later id of the process in the
 * future, so retention (which needs both id and created_at old) never removed its events and the
 * relay, claiming in id order, took them last.
 */
export const MAX_CLOCK_STEP_BACK_MS = 10_000;

export function uuidv7(nowMs: number = Date.now()): string {
  let ms = nowMs;
  if (lastMs - ms > MAX_CLOCK_STEP_BACK_MS) {
    lastMs = ms;
    seq = 0;
  } else if (ms <= lastMs) {
    ms = lastMs;
    seq++;
    if (seq > 0xfff) {
      // Counter exhausted: borrow the next millisecond rather than lose ordering.
      ms = ++lastMs;
      seq = 0;
    }
  } else {
    lastMs = ms;
    seq = 0;
  }
  const rand = randomBytesPooled(8);
  const b = new Uint8Array(16);
  b[0] = (ms / 2 ** 40) & 0xff;
  b[1] = (ms / 2 ** 32) & 0xff;
  b[2] = (ms >>> 24) & 0xff;
  b[3] = (ms >>> 16) & 0xff;
  b[4] = (ms >>> 8) & 0xff;
  b[5] = ms & 0xff;
  b[6] = 0x70 | ((seq >>> 8) & 0x0f);
  b[7] = seq & 0xff;
  b[8] = 0x80 | (rand[0]! & 0x3f);
  b.set(rand.subarray(1, 8), 9);
  const hex = Buffer.from(b).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The unix milliseconds a UUIDv7 was made at. */
export function uuidv7Time(id: string): number {
  return parseInt(id.replace(/-/g, '').slice(0, 12), 16);
}
