import { z } from 'zod';

export const Health = z.strictObject({ status: z.literal('ok') }).meta({ id: 'Health' });
export const Ready = z.strictObject({ status: z.literal('ready') }).meta({ id: 'Ready' });
