// Random bytes drawn from a pooled buffer: one getrandom call per few hundred ids instead of one
// per id, which showed up as the top cost of the hot path (crypto-quality bytes all the same).
import { randomFillSync } from 'node:crypto';

const POOL_SIZE = 8192;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let offset = POOL_SIZE;

/** `n` (≤ 256) random bytes; the returned view is only valid until the next call. */
export function randomBytesPooled(n: number): Buffer {
  if (offset + n > POOL_SIZE) {
    randomFillSync(pool);
    offset = 0;
  }
  const view = pool.subarray(offset, offset + n);
  offset += n;
  return view;
}

export function randomHex(n: number): string {
  return randomBytesPooled(n).toString('hex');
}
