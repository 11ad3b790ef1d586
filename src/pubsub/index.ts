// The Pub/Sub push/Eventarc/pull surfaces (issue 3) land here.
export {};
