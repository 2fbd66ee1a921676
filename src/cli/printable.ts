// Text the CLI did not write (a receiver's answer, stored event data, error messages) goes to a
// person's terminal through printable(), so it cannot drive the terminal.

/**
 * Control characters (ESC sequences that clear the screen, retitle the window, fake colours or
 * hide a line) are shown as '·' rather than sent to the terminal.
 */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, '·');
}
