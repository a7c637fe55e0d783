/**
 * The launcher: a shell that prepares itself (joins the run's pids cgroup,
 * sets the resource limits with `ulimit`) and then becomes the command.
 * Whatever the command starts inherits both, and nothing of it runs before
 * the preparation succeeded.
 *
 * When the command is itself `sh -c SCRIPT` (exec_shell, omega's bash), the
 * launcher runs the script in the same shell instead of starting a second
 * one: one program start per call instead of two, about 0.8 ms here. The
 * script sees the same `$0` and arguments; it goes after the preparation on
 * the same line, so the shell parses it whole before running anything, and
 * a script that does not parse runs nothing at all.
 */

/** Exit status when the preparation fails (the command never runs). */
export const PREPARATION_FAILED = 126

/**
 * The kernel's out-of-memory killer takes a run's processes before the
 * service: when runs together fill the service's own memory bound (a pod's),
 * it would otherwise pick the largest process, often the service, and every
 * tenant's calls and processes would end with it. Raising one's own score
 * needs no privilege; where it cannot be written the run goes on.
 */
const OOM_FIRST = 'echo 1000 2>/dev/null >/proc/self/oom_score_adj'

/** `/bin/sh -c '<oom score>; <prelude> || exit 126; …'` running `command args…`. */
export function launcherArgv (prelude: string, command: string, args: string[]): string[] {
  const guard = `${OOM_FIRST}; ${prelude} || exit ${PREPARATION_FAILED}; `
  const script = args[1]
  if ((command === 'sh' || command === '/bin/sh') && args[0] === '-c' && script !== undefined) {
    // `sh -c SCRIPT` names its $0 `sh`; `sh -c SCRIPT NAME ARGS…` names it NAME.
    return ['/bin/sh', '-c', guard + script, ...(args.length > 2 ? args.slice(2) : ['sh'])]
  }
  return ['/bin/sh', '-c', `${guard}exec "$@"`, 'sh', command, ...args]
}

/** A path as one single-quoted shell word. */
export function shellQuote (value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`
}
