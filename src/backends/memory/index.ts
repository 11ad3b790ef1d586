export { MemoryBackend, type MemoryBackendOptions } from "./memory-backend.js";
