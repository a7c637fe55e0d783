/**
 * The environment every tool process gets: a fixed, minimal base and the
 * tool's own extras. Nothing comes from the service's environment, which may
 * hold tokens and other secrets.
 */
export const SAFE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export function scrubbedEnvironment (cwd: string, extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: SAFE_PATH, HOME: cwd, LANG: 'C.UTF-8', TMPDIR: '/tmp', ...extra }
}
