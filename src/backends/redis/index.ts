// The Redis backend (issue 4) lands here.
export {};
