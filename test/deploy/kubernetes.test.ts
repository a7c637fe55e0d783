/**
 * deploy/kubernetes/: every manifest validates against the Kubernetes JSON
 * schemas (bundled by kubernetes-models: no network), the ConfigMap's config
 * passes Toolport's own validation, and the pieces fit together.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parseAllDocuments, parse as parseYaml } from 'yaml'
import { parseConfig, readTokensFile } from '../../src/config.ts'
import { tempDir } from '../support/temp.ts'

const DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'deploy', 'kubernetes')

type Manifest = { apiVersion: string, kind: string, metadata: { name: string, labels?: Record<string, string> }, [key: string]: any }

function load (file: string): Manifest[] {
  return parseAllDocuments(readFileSync(path.join(DIR, file), 'utf8')).map((doc) => {
    expect(doc.errors, file).toEqual([])
    return doc.toJS() as Manifest
  }).filter(Boolean)
}

const files = readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
const manifests = files.flatMap((file) => load(file).map((manifest) => ({ file, manifest })))
const one = (kind: string): Manifest => {
  const found = manifests.filter((m) => m.manifest.kind === kind)
  expect(found, kind).toHaveLength(1)
  return found[0]!.manifest
}

/** The kubernetes-models module for an apiVersion and kind: `apps/v1` + `Deployment` → kubernetes-models/apps/v1/Deployment. */
async function validateManifest (manifest: Manifest): Promise<void> {
  const specifier = `kubernetes-models/${manifest.apiVersion}/${manifest.kind}`
  const module = await import(/* @vite-ignore */ specifier) as Record<string, new (data: unknown) => { validate: () => void }>
  const Model = module[manifest.kind]
  if (!Model) throw new Error(`no schema for ${manifest.apiVersion} ${manifest.kind}`)
  new Model(manifest).validate()
}

const deployment = one('Deployment')
const pod = deployment['spec'].template.spec
const container = pod.containers[0]
const configText = one('ConfigMap')['data']['toolport.yaml'] as string
const config = parseConfig(parseYaml(configText))

describe('kubernetes manifests', () => {
  it('validate against the Kubernetes schemas', async () => {
    expect(manifests.map((m) => m.manifest.kind).sort()).toEqual(
      ['ConfigMap', 'Deployment', 'HorizontalPodAutoscaler', 'NetworkPolicy', 'PersistentVolumeClaim', 'PodDisruptionBudget', 'Secret', 'Service'])
    for (const { file, manifest } of manifests) await expect(validateManifest(manifest), file).resolves.toBeUndefined()
  })

  it('the validator rejects a manifest with a wrong type or a missing field', async () => {
    const broken = structuredClone(deployment)
    broken['spec'].template.spec.containers[0].ports[0].containerPort = '8080'
    await expect(validateManifest(broken)).rejects.toThrow(/containerPort must be integer/)
    const noPort = structuredClone(deployment)
    delete noPort['spec'].template.spec.containers[0].readinessProbe.httpGet.port
    await expect(validateManifest(noPort)).rejects.toThrow(/required property/)
  })

  it('kustomization lists every manifest but the Secret example', () => {
    const kustomization = parseYaml(readFileSync(path.join(DIR, 'kustomization.yaml'), 'utf8')) as { resources: string[] }
    expect([...kustomization.resources].sort()).toEqual(files.filter((f) => !f.startsWith('secret.')).sort())
  })

  it('the ConfigMap holds a config that passes the service validation and listens for the Service', () => {
    expect(config.server.host).toBe('0.0.0.0')
    expect(container.ports[0].containerPort).toBe(config.server.port)
    expect(container.args).toEqual(['node', '--max-semi-space-size=8', 'dist/bundle/server.js', '--config', '/etc/toolport/toolport.yaml'])
    const configMount = container.volumeMounts.find((m: { name: string }) => m.name === 'config')
    expect(configMount.mountPath).toBe('/etc/toolport')
  })

  it('takes its tokens from the mounted Secret, so it may listen beyond loopback', async () => {
    const secret = one('Secret')
    const tokensMount = container.volumeMounts.find((m: { name: string }) => m.name === 'tokens')
    const tokensVolume = pod.volumes.find((v: { name: string }) => v.name === 'tokens')
    expect(tokensVolume.secret.secretName).toBe(secret.metadata.name)
    const [mountDir, key] = [path.dirname(config.auth.tokens_file ?? ''), path.basename(config.auth.tokens_file ?? '')]
    expect(mountDir).toBe(tokensMount.mountPath)
    // The server refuses 0.0.0.0 without tokens: the Secret's tokens file must load.
    const dir = await tempDir()
    await writeFile(path.join(dir, key), secret['stringData'][key])
    expect((await readTokensFile(path.join(dir, key))).length).toBeGreaterThan(0)
  })

  it('probes /healthz and /readyz, sets resources and a locked-down securityContext', () => {
    expect(container.readinessProbe.httpGet.path).toBe('/readyz')
    expect(container.livenessProbe.httpGet.path).toBe('/healthz')
    expect(container.startupProbe.httpGet.path).toBe('/healthz')
    for (const kind of ['requests', 'limits']) expect(Object.keys(container.resources[kind]).sort()).toEqual(expect.arrayContaining(['cpu', 'memory']))
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 })
    expect(container.securityContext).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } })
    expect(pod.automountServiceAccountToken).toBe(false)
  })

  it('gives the drain time to finish: grace period > preStop pause + drain timeout', () => {
    const preStop = container.lifecycle?.preStop?.exec?.command as string[] | undefined
    const pause = preStop?.[0] === 'sleep' ? Number(preStop[1]) : 0
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(pause + config.server.drain_timeout_ms / 1000)
  })

  it('mounts writable volumes where the service writes, with a ReadWriteMany claim for workspaces', () => {
    const workspaceMount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === config.workspaces.root)
    expect(workspaceMount?.readOnly).not.toBe(true)
    expect(container.volumeMounts.some((m: { mountPath: string }) => m.mountPath === '/tmp')).toBe(true)
    const claimName = pod.volumes.find((v: { name: string }) => v.name === workspaceMount.name).persistentVolumeClaim.claimName
    const pvc = one('PersistentVolumeClaim')
    expect(pvc.metadata.name).toBe(claimName)
    expect(pvc['spec'].accessModes).toEqual(['ReadWriteMany'])
  })

  it('keeps each pod\'s ephemeral workspaces on a pod-local emptyDir outside the shared root', () => {
    expect(config.workspaces.ephemeral_root).toBeDefined()
    expect(config.workspaces.ephemeral_root?.startsWith(`${config.workspaces.root}/`)).toBe(false)
    const mount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === config.workspaces.ephemeral_root)
    expect(pod.volumes.find((v: { name: string }) => v.name === mount?.name)?.emptyDir).toBeDefined()
  })

  it('Service, HPA, PDB and NetworkPolicy point at the Deployment and its pods', () => {
    const labels = deployment['spec'].template.metadata.labels
    const selects = (selector: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v)
    const service = one('Service')
    expect(selects(service['spec'].selector)).toBe(true)
    expect(service['spec'].ports[0].targetPort).toBe(container.ports[0].name)
    const hpa = one('HorizontalPodAutoscaler')
    expect(hpa['spec'].scaleTargetRef).toMatchObject({ kind: 'Deployment', name: deployment.metadata.name })
    expect(hpa['spec'].minReplicas).toBeGreaterThanOrEqual(2)
    const pdb = one('PodDisruptionBudget')
    expect(selects(pdb['spec'].selector.matchLabels)).toBe(true)
    expect(pdb['spec'].minAvailable).toBeLessThan(hpa['spec'].minReplicas)
    const policy = one('NetworkPolicy')
    expect(selects(policy['spec'].podSelector.matchLabels)).toBe(true)
    expect(policy['spec'].ingress[0].ports).toEqual([{ port: config.server.port, protocol: 'TCP' }])
  })

  it('NetworkPolicy egress allows public HTTP(S) but no private range, and DNS only to kube-dns', () => {
    const egress = one('NetworkPolicy')['spec'].egress as Array<{ to?: Array<Record<string, any>>, ports?: Array<{ port: number }> }>
    expect(egress.every((rule) => rule.to && rule.to.length > 0)).toBe(true)
    const open = egress.flatMap((rule) => rule.to ?? []).filter((peer) => peer['ipBlock'])
    expect(open).toHaveLength(1)
    expect(open[0]!['ipBlock'].except).toEqual(expect.arrayContaining(['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16']))
    const dns = egress.find((rule) => rule.ports?.some((p) => p.port === 53))
    expect(dns?.to?.[0]?.['podSelector'].matchLabels).toEqual({ 'k8s-app': 'kube-dns' })
  })

  it('advertises each pod at its own IP, and lets the pods reach each other there', () => {
    const env = container.env as Array<{ name: string, value?: string, valueFrom?: any }>
    const podIp = env.findIndex((e) => e.name === 'POD_IP')
    const advertised = env.findIndex((e) => e.name === 'TOOLPORT_ADVERTISE_URL')
    expect(env[podIp]?.valueFrom).toEqual({ fieldRef: { fieldPath: 'status.podIP' } })
    // Kubernetes expands $(POD_IP) only from a variable defined earlier in the list.
    expect(podIp).toBeGreaterThanOrEqual(0)
    expect(advertised).toBeGreaterThan(podIp)
    const port = container.env.find((e: { name: string }) => e.name === 'PORT').value
    expect(env[advertised]?.value).toBe(`http://$(POD_IP):${port}`)
    // The service accepts that URL once POD_IP is in it.
    expect(parseConfig({ server: { advertise_url: env[advertised]!.value!.replace('$(POD_IP)', '10.1.2.3') } }).server.advertise_url).toBe('http://10.1.2.3:8080')
    const labels = deployment['spec'].template.metadata.labels
    const egress = one('NetworkPolicy')['spec'].egress as Array<{ to: Array<Record<string, any>>, ports?: Array<{ port: number }> }>
    const toPeers = egress.find((rule) => rule.to.some((peer) => peer['podSelector'] && !peer['namespaceSelector'] &&
      Object.entries(peer['podSelector'].matchLabels).every(([k, v]) => labels[k] === v)))
    expect(toPeers?.ports).toEqual([{ port: Number(port), protocol: 'TCP' }])
  })
})
