import { describe, expect, it } from 'vitest';
import { chooseEnv, envChoices } from '../../console/scopes.ts';

const claims = (envs: string[]) => ({ sub: 'a', envs, scopes: ['flow:read'] });

/** Which env the console opens on: the URL's, else the last one picked if the token allows it, else the token's own. */
describe('the console opens the env the token is for', () => {
  it('a token for one env opens that env, not the server default', () => {
    expect(chooseEnv(claims(['tenant-a']), { server: 'default' })).toBe('tenant-a');
  });
  it('a token for every env (`*`) opens the server default', () => {
    expect(chooseEnv(claims(['*']), { server: 'default' })).toBe('default');
  });
  it('the server default when the token holds it among others', () => {
    expect(chooseEnv(claims(['tenant-b', 'default']), { server: 'default' })).toBe('default');
  });
  it('?env= wins, even one the token lacks (the page then says so)', () => {
    expect(chooseEnv(claims(['tenant-a']), { server: 'default', url: 'tenant-b' })).toBe('tenant-b');
  });
  it('the last env picked, only while the token still allows it', () => {
    expect(chooseEnv(claims(['tenant-a', 'tenant-b']), { server: 'default', picked: 'tenant-b' })).toBe('tenant-b');
    expect(chooseEnv(claims(['tenant-a']), { server: 'default', picked: 'tenant-b' })).toBe('tenant-a');
  });
  it('offers the token envs in the picker, with the current one', () => {
    expect(envChoices(claims(['tenant-a', 'tenant-b']), 'tenant-a')).toEqual(['tenant-a', 'tenant-b']);
    expect(envChoices(claims(['*']), 'default')).toEqual(['default']);
    expect(envChoices(claims(['tenant-a']), 'elsewhere')).toEqual(['elsewhere', 'tenant-a']);
  });
});
