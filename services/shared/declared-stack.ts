import { z } from 'zod';

/**
 * The declared stack as data: what the Pulumi program (infra/program.ts) declares, read under the
 * runtime mocks with placeholder secrets. infra/describe-cli.ts prints it as JSON; the production
 * checklist (identity:prod-check) and the rehearsal read it, so they check what `pulumi up` would
 * create, not text in source files. It never holds a real secret: every secret is a placeholder.
 */

const PortSchema = z.object({ internal: z.number(), external: z.number().optional(), protocol: z.string().optional() });
const AttachmentSchema = z.object({ name: z.string(), aliases: z.array(z.string()), ipv4Address: z.string().optional() });

export const DeclaredContainerSchema = z.object({
  /** The Pulumi resource name (features-db, kratos, backup …). */
  name: z.string(),
  /** The Docker container name (<namePrefix>-<name>). */
  dockerName: z.string(),
  kind: z.enum(['service', 'job']),
  image: z.string(),
  ports: z.array(PortSchema),
  networks: z.array(AttachmentSchema),
  /** `container:<dockerName>` when it shares another container's network namespace. */
  networkMode: z.string().optional(),
  env: z.record(z.string(), z.string()),
  /** Whether the program hands the environment over as a Pulumi secret (encrypted in state, masked in logs). */
  envIsSecret: z.boolean(),
  command: z.array(z.string()),
  entrypoints: z.array(z.string()),
  uploads: z.array(z.object({ file: z.string(), content: z.string() })),
  volumes: z.array(z.object({ volumeName: z.string(), containerPath: z.string(), readOnly: z.boolean().optional() })),
  /** Docker's limits: memory and swap in MiB (`memory`, `memory_swap`), CPU cores (`cpus`), processes of its user (the nproc ulimit, the stack's pids limit). */
  limits: z.object({ memoryMb: z.number().optional(), memorySwapMb: z.number().optional(), cpus: z.number().optional(), processes: z.number().optional() }).optional(),
});

export const DeclaredStackSchema = z.object({
  parentDomain: z.string(),
  internalCidrs: z.array(z.string()),
  networks: z.array(z.object({ name: z.string(), internal: z.boolean(), subnet: z.string().optional() })),
  containers: z.array(DeclaredContainerSchema),
  /** The rendered Caddyfile the proxy receives. */
  caddyfile: z.string(),
  /** Deploy targets; `preview` marks branch-family targets that run code from team pushes. */
  targets: z.array(z.object({ key: z.string(), domain: z.string(), preview: z.boolean() })),
  /**
   * Where each secret comes from: `generated` by the program (RandomPassword of `length` characters,
   * kept encrypted in the state), set in the `stack file` encrypted (never decrypted by the describer),
   * or in `plain text in the stack file` (a mistake: the file is committed).
   */
  secrets: z.array(z.object({ name: z.string(), source: z.enum(['generated', 'stack file', 'plain text in the stack file']), length: z.number().optional() })).optional(),
});

export type DeclaredContainer = z.infer<typeof DeclaredContainerSchema>;
export type DeclaredStack = z.infer<typeof DeclaredStackSchema>;
