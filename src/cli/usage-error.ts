// The command line was wrong: a malformed flag value, a missing or conflicting argument. Exit 2,
// code ERR_USAGE like commander's own errors, and the flag in `field`. Database settings keep
// the OptionsError createBus gives for them (a bad --database-url is ERR_OPTIONS, as documented).
import { ReaError, type OptionsError } from '../core/errors.js';

export class UsageError extends ReaError {
  constructor(readonly field: string, problem: string) {
    super('ERR_USAGE', `invalid option ${field}: ${problem}`);
  }
}

/**
 * The library's OptionsError about a value a flag gave (it names the option, `watchColumns[1]`)
 * as the usage error naming that flag; null when no flag gave it.
 */
export function flagError(err: OptionsError, flagOf: (option: string) => string | undefined): UsageError | null {
  const [, option = '', index] = /^([^[]*)(?:\[(\d+)\])?$/.exec(err.field) ?? [];
  const flag = flagOf(option);
  if (!flag) return null;
  const problem = err.message.replace(/^invalid option \S+: /, '');
  return new UsageError(flag, index === undefined ? problem : `${problem} (item ${Number(index) + 1} of the list)`);
}
