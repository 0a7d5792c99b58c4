/** Milliseconds of an ISO 8601 duration limited to weeks, days, hours, minutes and seconds. */
export function durationMs(iso: string): number {
  const m = /^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$/.exec(iso);
  if (m === null) throw new Error(`not an ISO 8601 duration: ${iso}`);
  const [, w, d, h, min, s] = m.map((x) => Number(x ?? 0));
  return ((((w! * 7 + d!) * 24 + h!) * 60 + min!) * 60 + s!) * 1000;
}
