export { RedisBackend, type RedisBackendOptions } from "./redis-backend.js";
export {
  detectFlavour,
  type IoredisLike,
  type NodeRedisLike,
  type RedisClientLike,
  type RedisFlavour,
} from "./redis-client.js";
