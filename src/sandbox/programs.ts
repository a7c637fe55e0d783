/**
 * The programs the sandbox runs commands through, by fixed path: never
 * looked up on a PATH, which a workspace or a caller could shadow.
 */
export const BWRAP = '/usr/bin/bwrap'
export const NSENTER = '/usr/bin/nsenter'
