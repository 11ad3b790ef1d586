export { canonicalJson, hashPayload } from "./payload-hash.js";
export type {
  ReservationClientLike,
  ReservationConnectionLike,
  ReservationDatabase,
  ReservationPoolLike,
  ReservationQueryResult,
} from "./pg-client.js";
export {
  RESERVATION_TTL_BOUNDS,
  ReservationError,
  ReservationErrorCode,
  type ReservationJson,
  type ReservationResult,
  type ReservationSlot,
  type ReserveOptions,
  reserve,
} from "./reserve.js";
export {
  DEFAULT_RESERVATION_TABLE,
  migrateReservations,
  type PurgeReservationsOptions,
  purgeExpiredReservations,
  type ReservationTableOptions,
} from "./schema.js";
