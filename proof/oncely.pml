/*
 * oncely's protocol as a Promela model, checked by spin (see README.md).
 *
 * One key, one record, N workers. Each worker takes up to DELIVERIES deliveries of the same message
 * and for each one: claims the key with a fresh per-call token, runs the work (WORK side effects)
 * while a heartbeat renews the claim, then completes the key (or releases it when the work fails or
 * sees its abort signal). Every step may be the last one: a worker can crash anywhere, stop being
 * scheduled for as long as it likes (a GC pause, a frozen VM) while the clock runs on, lose a
 * request or its reply, retry a call with the same token, and give up on a call at its deadline.
 *
 * The store's transitions are those of src/core/transitions.ts (the transition table of the design),
 * one atomic step each. Time is an integer clock that advances nondeterministically up to TMAX.
 * With SERVER_CLOCK the store judges time by its own clock; without it (the default: memory, SQLite,
 * Datastore, Firestore, DynamoDB) each worker's calls are judged by that worker's clock: the last
 * worker's runs SKEW ahead of the others'.
 *
 * Mutants (each must be caught): MUTANT_COMPLETE_NO_FENCE, MUTANT_RELEASE_DELETES,
 * MUTANT_RENEW_NO_FENCE, MUTANT_CLAIM_IGNORES_TOKEN, MUTANT_HEARTBEAT_IGNORES_FAILURE.
 *
 * Properties (assertions; the label names what run.mjs reports):
 *   P1 exclusion     every side effect is done by the worker whose claim is the record's current one
 *   P2 once          a finished work is never run again, except after its done record expired (ttl)
 *                    or in the crash window: its worker finished but its complete was not recorded
 *                    and its claim was taken over after the lease lapsed (counted in `windows`)
 *   P3 fenced        a released or taken-over claim never completes (nor releases, nor renews)
 *   P4 takeover      a crashed holder's key is claimable within one lease of its last request
 *                    reaching the store (a request already on the wire arrives within MAXDELAY)
 *   P5 monotone      the fence never decreases while the record exists
 *   P6 retry-safe    a retried claim never finds the key held by its own call, nor bumps its own fence
 */

#ifndef N
#define N 3
#endif
#ifndef LEASE
#define LEASE 3 /* leaseMs */
#endif
#ifndef MARGIN
#define MARGIN 1 /* the heartbeat's abort margin: ceil(lease / 10) */
#endif
#ifndef INTERVAL
#define INTERVAL 1 /* the heartbeat's cadence: floor(lease / 3) */
#endif
#ifndef TTL
#define TTL 2 /* ttlMs */
#endif
#ifndef HB_DEADLINE
#define HB_DEADLINE 1 /* a renewal's deadline: min(storeTimeoutMs, lease / 3) */
#endif
#ifndef MAXDELAY
#define MAXDELAY 2 /* a request reaches the store (or is lost) within this long of being sent */
#endif
#ifndef SKEW
#define SKEW 0 /* the last worker's clock runs this far ahead (ignored with SERVER_CLOCK) */
#endif
#ifndef TMAX
#define TMAX 6 /* the clock stops here */
#endif
#ifndef DELIVERIES
#define DELIVERIES 1 /* deliveries of the message to each worker */
#endif
#ifndef RETRIES
#define RETRIES 1 /* retries of a failed claim, complete or release before it gives up (its deadline) */
#endif
#ifndef WORK
#define WORK 1 /* side effects in one run of the work */
#endif
#ifndef CRASHES
#define CRASHES 1 /* crashes in one run */
#endif

/* record states; store calls; claim answers; why a claim was won */
#define CLAIMED 1
#define DONE 2
#define OP_CLAIM 1
#define OP_COMPLETE 2
#define OP_RELEASE 3
#define OP_RENEW 4
#define WON 1
#define HELD 2
#define SEEN_DONE 3
#define VIA_ABSENT 1
#define VIA_REAFFIRMED 2
#define VIA_LAPSED 3
#define VIA_EXPIRED 4

/* worker phases */
#define IDLE 0
#define WORKING 2
#define FINISHED 5
#define CRASHED 6

/* the heartbeat's wire: idle, or a renewal on the wire */
#define W_IDLE 0
#define W_SENT 1

byte now = 0; /* the true time */

/* the record of the one key */
bool present = false;
byte st = 0;
byte fence = 0;
byte token = 0; /* 0: none (released) */
byte leaseUntil = 0;
byte expiresAt = 0;

/* workers (a variable no longer needed is reset to 0, so that equal states meet) */
byte skew[N];
byte phase[N];
byte delivery[N];
byte myFence[N];
byte validFrom[N]; /* when the last successful claim or renew was sent (worker clock) */
byte prog[N];
bool aborted[N];
/* the heartbeat's renewal in flight */
byte hState[N];
byte hArg[N];
byte hAt[N]; /* true time it was sent */
byte hSent[N]; /* worker clock when it was sent */
bool hWait[N]; /* the heartbeat still waits for its answer */

/* ghosts: what the properties are stated over */
byte holder = 0; /* 1 + the worker whose claim made the record's current fence (0: none) */
bool lost[N]; /* the worker's claim was released or taken over */
bool finished[N]; /* the worker's current claim finished its work */
byte lastCall[N]; /* true time the worker's last request reached the store */
byte crashes = 0;
byte runs = 0; /* finished runs of the work */
byte windows = 0; /* takeovers of a finished claim whose complete was not recorded (the crash window) */
byte reruns = 0; /* claims of a done record past its expiry (a new key: a legitimate run) */
byte lastFence = 0;

/*
 * For random simulations (the traces replayed on the real backends): SIM_LOSSES bounds the requests
 * and replies lost in one run, SIM_BACKOFF spaces a worker's redeliveries, so that a run reaches
 * completes and renewals more often. The exhaustive check uses neither.
 */
#ifdef SIM_LOSSES
byte losses = 0;
#define MAY_LOSE (losses < SIM_LOSSES)
#define LOST losses++
#else
#define MAY_LOSE true
#define LOST skip
#endif
#ifdef SIM_BACKOFF
byte nextTry[N];
#define REDELIVERY_DUE(w) (now >= nextTry[w])
#define REDELIVER_LATER(w) nextTry[w] = now + SIM_BACKOFF
#else
#define REDELIVERY_DUE(w) true
#define REDELIVER_LATER(w) skip
#endif

#define local(w) (now + skew[w])
#ifdef SERVER_CLOCK
#define storeNow(w) (now)
#else
#define storeNow(w) (now + skew[w])
#endif

/* the clock may not pass a request still on the wire by more than MAXDELAY */
#define onTime(w) (hState[w] != W_SENT || now < hAt[w] + MAXDELAY)

#if N == 3
#define allOnTime (onTime(0) && onTime(1) && onTime(2))
#elif N == 4
#define allOnTime (onTime(0) && onTime(1) && onTime(2) && onTime(3))
#else
#error "N is 3 or 4"
#endif

active proctype Clock() {
end:
  do
  :: atomic { now < TMAX && allOnTime -> now++ }
  od
}

/* ---- the store: one atomic transition per call (src/core/transitions.ts) ---- */

inline write_claim(w, tk, t, nf) {
  present = true;
  st = CLAIMED;
  fence = nf;
  token = tk;
  leaseUntil = t + LEASE;
  expiresAt = t + LEASE + TTL;
  holder = w + 1;
  lastCall[w] = now;
  lost[w] = false;
  finished[w] = false
}

/* a claim won over a record another claim made: the old claim is lost; a finished one opens the window */
inline take_over(w) {
  if
  :: holder != 0 && st == CLAIMED ->
     lost[holder - 1] = true;
     if
     :: finished[holder - 1] -> windows++
     :: else
     fi
  :: holder != 0 && st == DONE -> reruns++
  :: else
  fi
}

inline store_claim(w, tk, t) {
  if
  :: !present -> val = WON; f = 1; via = VIA_ABSENT
  :: present && t >= expiresAt -> take_over(w); val = WON; f = fence + 1; via = VIA_EXPIRED
  :: present && t < expiresAt && st == DONE -> val = SEEN_DONE; f = fence
  :: present && t < expiresAt && st == CLAIMED ->
     if
#ifndef MUTANT_CLAIM_IGNORES_TOKEN
     :: token != 0 && token == tk -> val = WON; f = fence; via = VIA_REAFFIRMED
#endif
     :: else ->
        if
        :: t < leaseUntil ->
           assert(token != tk); /* P6 retry-safe: never held by its own call */
           val = HELD; f = fence
        :: else ->
           assert(token != tk); /* P6 retry-safe: never bumps its own fence */
           take_over(w); val = WON; f = fence + 1; via = VIA_LAPSED
        fi
     fi
  fi;
  if
  :: val == WON -> write_claim(w, tk, t, f)
  :: else
  fi
}

inline store_complete(w, cf, t) {
#ifdef MUTANT_COMPLETE_NO_FENCE
  if
  :: present && (fence == cf || st == CLAIMED) ->
#else
  if
  :: present && fence == cf ->
#endif
     if
     :: st == CLAIMED -> st = DONE; expiresAt = t + TTL
     :: else
     fi;
     val = 1;
     assert(!lost[w]) /* P3 fenced: a released or taken-over claim never completes */
  :: else -> val = 0
  fi
}

inline store_release(w, cf, t) {
  if
  :: present && st == CLAIMED && fence == cf ->
     assert(!lost[w]); /* P3 fenced */
#ifdef MUTANT_RELEASE_DELETES
     present = false; st = 0; fence = 0; token = 0; leaseUntil = 0; expiresAt = 0;
#else
     fence++; token = 0; leaseUntil = t; expiresAt = t + TTL;
#endif
     lost[w] = true; holder = 0;
     val = 1
  :: else -> val = 0
  fi
}

inline store_renew(w, cf, t) {
#ifdef MUTANT_RENEW_NO_FENCE
  if
  :: present && st == CLAIMED ->
#else
  if
  :: present && st == CLAIMED && fence == cf ->
     assert(!lost[w]); /* P3 fenced */
#endif
     leaseUntil = t + LEASE; expiresAt = t + LEASE + TTL;
     lastCall[w] = now;
     rv = true
  :: else -> rv = false
  fi
}

/* after every write: P5 monotone */
inline check_fence() {
  if
  :: present -> assert(fence >= lastFence); lastFence = fence
  :: else
  fi
}

/* P4 takeover: a held answer never names a crashed holder for longer than one lease (and skew) */
inline check_takeover(w) {
  if
  :: val == HELD && holder != 0 && phase[holder - 1] == CRASHED ->
     assert(now < lastCall[holder - 1] + LEASE + SKEW)
  :: else
  fi
}

/*
 * One claim, complete or release, decided when it is sent: each attempt reaches the store or is lost,
 * and its reply arrives or is lost (a connection error either way); a failed attempt is retried with
 * the same arguments (the claim's token) up to RETRIES times, then the call gives up (its deadline).
 * ok: the reply arrived, its answer is in val (and f).
 */
inline call(w, op, arg) {
  attempt = 0;
  ok = false;
  do
  :: attempt > RETRIES -> break
  :: attempt <= RETRIES ->
     attempt++;
     if
     :: true -> /* the request reaches the store */
        t = storeNow(w);
        printf("@send w=%d op=%d arg=%d t=%d\n", w, op, arg, t);
        if
        :: op == OP_CLAIM ->
           via = 0;
           store_claim(w, arg, t);
           check_takeover(w);
           printf("@call w=%d op=claim arg=%d t=%d val=%d f=%d via=%d", w, arg, t, val, f, via)
        :: op == OP_COMPLETE ->
           store_complete(w, arg, t);
           printf("@call w=%d op=complete arg=%d t=%d val=%d f=%d via=0", w, arg, t, val, arg)
        :: op == OP_RELEASE ->
           store_release(w, arg, t);
           printf("@call w=%d op=release arg=%d t=%d val=%d f=%d via=0", w, arg, t, val, arg)
        fi;
        printf(" rec=%d,%d,%d,%d,%d,%d\n", present, st, fence, token, leaseUntil, expiresAt);
        check_fence();
        if
        :: ok = true; break /* the reply arrives */
        :: MAY_LOSE -> LOST /* the reply is lost */
        fi
     :: MAY_LOSE -> LOST /* the request is lost */
     fi
  od
}

/* the heartbeat runs from the won claim until the key is completed or released */
#define beating(w) (phase[w] == WORKING && !aborted[w])

/* the heartbeat's abort: the claim is judged lost a lease minus the margin after validFrom */
#define pastDeadline(w) (local(w) + MARGIN >= validFrom[w] + LEASE)

#define renew_ok(w) if :: hSent[w] > validFrom[w] -> validFrom[w] = hSent[w] :: else fi

#ifdef MUTANT_HEARTBEAT_IGNORES_FAILURE
/* the mutant carries on after a failed renewal as if it had succeeded */
#define renew_failed(w, fenced) renew_ok(w)
#else
/* fenced out: the claim is lost and the heartbeat stops; a failure: it tries again (soon) */
#define renew_failed(w, fenced) if :: fenced -> aborted[w] = true :: else fi
#endif

/* the renewal on w's heartbeat wire reaches the store; its reply arrives at once or is lost */
inline handle_renew(w) {
  t = storeNow(w);
  printf("@send w=%d op=4 arg=%d t=%d\n", w, hArg[w], t);
  store_renew(w, hArg[w], t);
  printf("@call w=%d op=renew arg=%d t=%d val=%d f=%d via=0", w, hArg[w], t, rv, hArg[w]);
  printf(" rec=%d,%d,%d,%d,%d,%d\n", present, st, fence, token, leaseUntil, expiresAt);
  check_fence();
  if
  :: hWait[w] && beating(w) && rv -> renew_ok(w)
  :: hWait[w] && beating(w) && !rv -> renew_failed(w, true)
  :: hWait[w] && beating(w) && MAY_LOSE -> LOST; renew_failed(w, false) /* the reply is lost */
  :: else
  fi;
  clear_hb(w);
  rv = false
}

/* ---- the worker: src/core/run.ts, src/core/heartbeat.ts, src/core/store-call.ts ---- */

inline clear_hb(w) {
  hState[w] = W_IDLE; hArg[w] = 0; hAt[w] = 0; hSent[w] = 0; hWait[w] = false
}

/* the worker holds no claim any more */
inline clear_claim(w) {
  myFence[w] = 0; validFrom[w] = 0; prog[w] = 0; aborted[w] = false
}

proctype Worker(byte w) {
  byte t;
  byte via;
  byte val;
  byte f;
  byte attempt;
  bool ok;
  bool rv;
end:
  do
  /* a delivery arrives: claim with a fresh token (unique per call: worker and delivery) */
  :: atomic { phase[w] == IDLE && delivery[w] < DELIVERIES && REDELIVERY_DUE(w) ->
       delivery[w]++;
       call(w, OP_CLAIM, w * DELIVERIES + delivery[w]);
       if
       :: ok && val == WON ->
          /* the claim is valid from when its call was sent */
          myFence[w] = f; validFrom[w] = local(w); prog[w] = 0; aborted[w] = false; phase[w] = WORKING
       :: ok && val == SEEN_DONE -> phase[w] = FINISHED /* a duplicate: acked */
       :: else -> REDELIVER_LATER(w) /* held (contention) or unavailable: redelivered later */
       fi;
       t = 0; via = 0; val = 0; f = 0; attempt = 0; ok = false }

  /* the work: one side effect, unless the abort has fired */
  :: atomic { phase[w] == WORKING && prog[w] < WORK && !aborted[w] ->
       if
       :: pastDeadline(w) -> aborted[w] = true
       :: else ->
          printf("@effect w=%d f=%d t=%d\n", w, myFence[w], now);
          assert(present && st == CLAIMED && fence == myFence[w]); /* P1 exclusion */
          prog[w]++;
          if
          :: prog[w] == WORK -> /* the last effect: one run of the work is done */
             runs++; finished[w] = true;
             assert(runs <= 1 + windows + reruns) /* P2 once */
          :: else
          fi
       fi }
  /* the work returns (even if the abort fired after its last effect) and the key is completed: done,
     fenced out or failed (then the message is redelivered) */
  :: atomic { phase[w] == WORKING && prog[w] == WORK ->
       call(w, OP_COMPLETE, myFence[w]);
       if
       :: ok && val == 1 -> phase[w] = FINISHED
       :: else -> phase[w] = IDLE
       fi;
       clear_claim(w);
       t = 0; via = 0; val = 0; f = 0; attempt = 0; ok = false }
  /* the work throws (its own failure, or it saw the abort): release */
  :: atomic { phase[w] == WORKING && prog[w] < WORK ->
       call(w, OP_RELEASE, myFence[w]);
       phase[w] = IDLE;
       clear_claim(w);
       t = 0; via = 0; val = 0; f = 0; attempt = 0; ok = false }

  /* the heartbeat: renew when due (and again after a failure); the abort deadline stops it */
  :: atomic { beating(w) && hState[w] == W_IDLE && local(w) >= validFrom[w] + INTERVAL ->
       if
       :: pastDeadline(w) -> aborted[w] = true
       :: else -> hState[w] = W_SENT; hArg[w] = myFence[w]; hAt[w] = now; hSent[w] = local(w); hWait[w] = true
       fi }
  /* the network: the renewal reaches the store, or is lost */
  :: atomic { hState[w] == W_SENT -> handle_renew(w); t = 0 }
  :: atomic { hState[w] == W_SENT && MAY_LOSE -> LOST;
       if :: hWait[w] && beating(w) -> renew_failed(w, false) :: else fi;
       clear_hb(w) }
  /* its deadline: the heartbeat stops waiting (a late answer is ignored) */
  :: atomic { hWait[w] && hState[w] == W_SENT && local(w) >= hSent[w] + HB_DEADLINE ->
       if
       :: beating(w) -> renew_failed(w, false)
       :: else
       fi;
       hWait[w] = false; hSent[w] = 0 }

  /* a crash, at any step while it holds a claim (a crash elsewhere is a worker that stops acting):
     the process is gone; a renewal on the wire may still arrive */
  :: atomic { phase[w] == WORKING && crashes < CRASHES ->
       crashes++; phase[w] = CRASHED; clear_claim(w);
       if :: hState[w] != W_SENT -> clear_hb(w) :: else -> hWait[w] = false; hSent[w] = 0 fi }
  od
}

init {
  byte i = 0;
  atomic {
#ifndef SERVER_CLOCK
    /* one client clock runs ahead by SKEW: it may be the holder's or the claimant's */
    skew[N - 1] = SKEW;
#endif
    do
    :: i < N -> run Worker(i); i++
    :: else -> break
    od;
    printf("@model n=%d lease=%d ttl=%d skew=%d margin=%d\n", N, LEASE, TTL, SKEW, MARGIN)
  }
}
