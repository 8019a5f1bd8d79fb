import { ContractServer, type DoubleResponse } from './contract-server.js';
import { OpenApiContract } from './openapi-contract.js';
import { TestClock } from './clock.js';

/**
 * What the Kratos and the Hydra double share: an Ory service's two ports, each a ContractServer on
 * port 0 checked against the service's one vendored OpenAPI document — public (every path but
 * /admin/…) and admin (/admin/… and /health/…) — both answering the readiness probe from `ready`;
 * one clock, one start, one close, and the violations of both ports. A subclass adds its operations
 * with `this.public.on(…)` / `this.admin.on(…)`.
 */
export abstract class OryDouble {
  readonly clock: TestClock;
  readonly public: ContractServer;
  readonly admin: ContractServer;
  /** What /health/ready answers on both ports: false makes it 503, as when Ory's database is gone. */
  ready = true;

  /**
   * `service` names the ports in violations ("kratos public"); `specPath` and `contractId` are the
   * OpenAPI document and the id it is compiled under; `errorBody` is the service's error shape, which
   * the ports answer refused requests with.
   */
  protected constructor(
    service: string,
    specPath: string,
    contractId: string,
    errorBody: (status: number, message: string) => unknown,
    clock: TestClock | undefined,
  ) {
    this.clock = clock ?? new TestClock();
    const contract = new OpenApiContract(specPath, contractId);
    this.public = new ContractServer(`${service} public`, contract, (t) => !t.startsWith('/admin/'), errorBody);
    this.admin = new ContractServer(`${service} admin`, contract, (t) => t.startsWith('/admin/') || t.startsWith('/health/'), errorBody);
    this.public.on('isReady', () => this.readiness());
    this.admin.on('isReady', () => this.readiness());
  }

  async start(): Promise<this> {
    await Promise.all([this.public.start(), this.admin.start()]);
    return this;
  }

  async close(): Promise<void> {
    await Promise.all([this.public.close(), this.admin.close()]);
  }

  get violations(): string[] {
    return [...this.public.violations, ...this.admin.violations];
  }

  private readiness(): DoubleResponse {
    return this.ready ? { status: 200, body: { status: 'ok' } } : { status: 503, body: { errors: { database: 'not reachable' } } };
  }
}
