import { workflow } from 'sentin8-flow/sdk';
import { z } from 'zod';

/** One service of a tenant: provisioned by its own child workflow. */
export const provisioningService = workflow({
  logicId: 'provisioning.service',
  version: 1,
  domain: 'provisioning',
  description: 'Allocate and configure one service of a tenant.',
  input: z.object({ tenantId: z.string(), service: z.string(), region: z.string(), index: z.int().min(0) }),
})
  .proxy('allocate', {
    path: '/services/allocate',
    input: ({ input }) => ({ tenantId: input.tenantId, service: input.service, region: input.region }),
    output: z.object({ serviceId: z.string() }),
    compensate: {
      kind: 'proxy',
      path: '/services/deallocate',
      input: ({ input, steps }) => ({ tenantId: input.tenantId, serviceId: steps.allocate?.serviceId }),
    },
  })
  .proxy('configure', {
    path: '/services/configure',
    input: ({ input, steps }) => ({ serviceId: steps.allocate.serviceId, region: input.region, primary: input.index === 0 }),
  })
  .output(({ input, steps }) => ({ service: input.service, serviceId: steps.allocate.serviceId }));

/** Create a tenant, fan out one child per requested service, let DNS settle, then activate. */
export const provisioningTenant = workflow({
  logicId: 'provisioning.tenant',
  version: 1,
  domain: 'provisioning',
  description: 'Create a tenant and provision its services in parallel.',
  input: z.object({
    tenantId: z.string().min(1),
    plan: z.enum(['starter', 'pro']),
    services: z.array(z.object({ name: z.string(), region: z.string() })).min(1),
  }),
})
  .proxy('createTenant', {
    path: '/tenants',
    input: ({ input }) => ({ tenantId: input.tenantId, plan: input.plan }),
    output: z.object({ tenantRef: z.string() }),
    compensate: { kind: 'proxy', path: '/tenants/delete', input: ({ input }) => ({ tenantId: input.tenantId }) },
  })
  .children('services', {
    logicId: 'provisioning.service',
    version: 1,
    items: ({ input }) => input.services,
    itemInput: ({ input, item, index }) => ({ tenantId: input.tenantId, service: item.name, region: item.region, index }),
    output: z.object({ service: z.string(), serviceId: z.string() }),
  })
  .delay('settle', { duration: 'PT5M' })
  .proxy('activate', {
    path: '/tenants/activate',
    input: ({ input, steps }) => ({
      tenantId: input.tenantId,
      tenantRef: steps.createTenant.tenantRef,
      serviceIds: steps.services.map((s) => s.serviceId),
    }),
  })
  .output(({ input, steps }) => ({ tenantId: input.tenantId, services: steps.services.length }));
