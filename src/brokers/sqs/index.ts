// Placeholder while this entry is built (session 2026-12-03); replaced by its surface.
/** @internal */
export const PLACEHOLDER = true;
