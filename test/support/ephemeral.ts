/** Looking into an ephemeral root from a test. */
import { readdir } from 'node:fs/promises'

/** The workspaces in an ephemeral root: its entries but the record of its owner (src/workspaces/ephemeral.ts). */
export async function workspacesIn (root: string): Promise<string[]> {
  return (await readdir(root)).filter((name) => name !== '.owner')
}
