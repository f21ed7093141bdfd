/**
 * Reading the kernel's loose values: times that may be missing, lists an old kernel does not
 * send, shares kept between 0 and 1, counts of states. Pure functions, no text.
 */

import { Counts } from '../schema';

/** A number that is there and finite (a time, a share); null, undefined and NaN are not. */
export function known(value: number | null | undefined): value is number {
  return value !== null && value !== undefined && Number.isFinite(value);
}

/** A list from the kernel, or none: an old kernel sends no such key. */
export function listOf<T>(value: T[] | null | undefined): T[] {
  return Array.isArray(value)
    ? value.filter(item => item !== null && typeof item === 'object')
    : [];
}

/** A share of a device, 0 to 1; what is not a number is none. */
export function clampShare(value: number): number {
  return Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0;
}

/** Shares are sums of floats: 0.1 + 0.2 is 0.3 here, and a crumb below 0.001 is none. */
export function tidy(share: number): number {
  const value = Math.round(share * 1000) / 1000;
  return value > 0 ? value : 0;
}

/** The tasks in any of `states`, from the kernel's counts (over all tasks). */
export function countOf(counts: Counts | undefined, ...states: string[]): number {
  return states.reduce((sum, s) => sum + (Number(counts?.[s]) || 0), 0);
}
