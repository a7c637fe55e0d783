/** tar, loaded by the first archive packed or unpacked rather than at every start of the service. */
export type TarModule = typeof import('tar')

let tarModule: Promise<TarModule> | undefined

export const loadTar = (): Promise<TarModule> => (tarModule ??= import('tar'))
