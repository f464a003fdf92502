// What a run records: metric samples {metric, value, tags}, like k6's.
export const samples = [];
/** Tags of the scenario being played (k6 adds `scenario` to every sample). */
export const current = { tags: {} };

export function record(metric, value, tags = {}) {
  samples.push({ metric, value, tags: { ...current.tags, ...tags } });
}
