/*
 * The message schema: the one table every message type, record kind and field comes from.
 *
 * proto.h and codec.c expand this table into the index enums, the typed structs, the decoder's
 * schema rows and the builders; nothing else in the tree states a field count or kind. How the
 * table is written is described above PROTO_SCHEMA (record kinds and message types) and above
 * the first field list (the kinds of fields).
 *
 * Adding a message: append X(NAME, value) to PROTO_MSG_MAP in proto.h (at the end), add
 * MSG(NAME, name) here and its PROTO_FIELDS_NAME list; proto_enc_name, proto_send_name and
 * proto_name_msg then exist, and the unit round trip (test_proto) covers it. A field added to an
 * existing message goes at its end as N(...), so older peers stay understood.
 */
#ifndef SPW_PROTO_SCHEMA_H
#define SPW_PROTO_SCHEMA_H

/* clang-format off */
/*
 * PROTO_SCHEMA(REC, MSG, MSG0, ALIAS) lists the record kinds and message types:
 *   REC(NAME, name)            a record kind; its fields are PROTO_REC_FIELDS_NAME(F, N)
 *   MSG(NAME, name)            a message type PROTO_NAME; fields PROTO_FIELDS_NAME(F, N)
 *   MSG0(NAME, name)           a message type without fields
 *   ALIAS(NAME, name, OF, of)  a message type with the fields of message OF
 * A field list is a macro of two macro arguments, one call per field:
 *   F(INDEX, member, KIND, arg)  a field every sender sends
 *   N(INDEX, member, KIND, arg)  a field added since the first version: a sender may leave it
 *                                out (it and all after it), and the decoder marks it nil then;
 *                                N fields come after all F fields
 */
#define PROTO_SCHEMA(REC, MSG, MSG0, ALIAS)                                                        \
    REC(WINFO, winfo)                                                                              \
    REC(LOC, loc)                                                                                  \
    REC(TASK, task)                                                                                \
    REC(ARG, arg)                                                                                  \
    REC(WARG, warg)                                                                                \
    REC(SWORKER, sworker)                                                                          \
    REC(SCLIENT, sclient)                                                                          \
    REC(EARG, earg)                                                                                \
    REC(MOBJ, mobj)                                                                                \
    REC(HOLDER, holder)                                                                            \
    REC(MLOC, mloc)                                                                                \
    REC(MNODE, mnode)                                                                              \
    REC(OLOBJ, olobj)                                                                              \
    REC(GRAPH, graph)                                                                              \
    REC(RUN, run)                                                                                  \
    REC(DONE, done)                                                                                \
    REC(TRES, tres)                                                                                \
    REC(EXEC, exec)                                                                                \
    REC(OUT, out)                                                                                  \
    REC(PLUG, plug)                                                                                \
    REC(SPLUG, splug)                                                                              \
    REC(STRIPE, stripe)                                                                            \
    MSG(CHALLENGE, challenge)                                                                      \
    MSG(HELLO, hello)                                                                              \
    MSG(WELCOME, welcome)                                                                          \
    MSG(ERROR, error)                                                                              \
    MSG(OK, ok)                                                                                    \
    MSG(PUT_PLACE, put_place)                                                                      \
    MSG(PUT_TARGET, put_target)                                                                    \
    MSG(LOCATE, locate)                                                                            \
    MSG(LOCATION, location)                                                                        \
    MSG(RELEASE, release)                                                                          \
    MSG(SUBMIT, submit)                                                                            \
    MSG(SUBMIT_ACK, submit_ack)                                                                    \
    MSG(TASK_RESULT, task_result)                                                                  \
    MSG(TASK_RUN, task_run)                                                                        \
    MSG(TASK_DONE, task_done)                                                                      \
    MSG(OBJ_ADDED, obj_added)                                                                      \
    MSG(OBJ_DELETE, obj_delete)                                                                    \
    MSG(HEARTBEAT, heartbeat)                                                                      \
    MSG(OBJ_WRITE, obj_write)                                                                      \
    MSG(OBJ_READ, obj_read)                                                                        \
    MSG(OBJ_DATA, obj_data)                                                                        \
    MSG(PUT_DONE, put_done)                                                                        \
    MSG(ARENA_MAP, arena_map)                                                                      \
    MSG(ARENA, arena)                                                                              \
    MSG(OBJ_PIN, obj_pin)                                                                          \
    MSG(PINNED, pinned)                                                                            \
    MSG(OBJ_UNPIN, obj_unpin)                                                                      \
    MSG(OBJ_CREATE, obj_create)                                                                    \
    MSG(CREATED, created)                                                                          \
    MSG(OBJ_SEAL, obj_seal)                                                                        \
    MSG0(STATUS_REQ, status_req)                                                                   \
    MSG(STATUS, status)                                                                            \
    MSG(MEMORY_REQ, memory_req)                                                                    \
    MSG(MEMORY_OBJS, memory_objs)                                                                  \
    MSG(MEMORY_END, memory_end)                                                                    \
    MSG(OBJ_LIST_REQ, obj_list_req)                                                                \
    MSG(OBJ_LIST, obj_list)                                                                        \
    MSG(BROADCAST, broadcast)                                                                      \
    MSG(BROADCAST_DONE, broadcast_done)                                                            \
    MSG(REPLICATE, replicate)                                                                      \
    MSG(EXEC, exec)                                                                                \
    MSG(EXEC_ALLOC, exec_alloc)                                                                    \
    MSG(EXEC_ALLOC_OK, exec_alloc_ok)                                                              \
    ALIAS(EXEC_DONE, exec_done, TASK_DONE, task_done)                                              \
    MSG(TASK_STARTED, task_started)                                                                \
    MSG(GRAPHS_REQ, graphs_req)                                                                    \
    MSG(GRAPHS, graphs)                                                                            \
    MSG(TASK_CANCEL, task_cancel)                                                                  \
    MSG(TASK_RUNS, task_runs)                                                                      \
    MSG(TASK_DONES, task_dones)                                                                    \
    MSG(TASK_RESULTS, task_results)                                                                \
    MSG(EXECS, execs)                                                                              \
    ALIAS(EXEC_DONES, exec_dones, TASK_DONES, task_dones)                                          \
    MSG0(PING, ping)                                                                               \
    MSG0(PONG, pong)                                                                               \
    MSG(PLUGIN_ADD, plugin_add)                                                                    \
    MSG(PLUGIN_CHECKED, plugin_checked)                                                            \
    MSG(PLUGIN_RELEASE, plugin_release)                                                            \
    MSG(PLUGIN_GET, plugin_get)                                                                    \
    MSG(PLUGIN_INFO, plugin_info)                                                                  \
    ALIAS(PLUGIN_CHECK, plugin_check, PLUGIN_INFO, plugin_info)                                    \
    MSG0(PLUGINS_REQ, plugins_req)                                                                 \
    MSG(PLUGINS, plugins)                                                                          \
    MSG(PLUGIN_LOAD, plugin_load)                                                                  \
    MSG(WORKER_PLUGINS, worker_plugins)                                                            \
    MSG(DRAIN, drain)                                                                              \
    MSG0(BYE, bye)                                                                                 \
    MSG(OBJS_HELD, objs_held)

/* ------------------------------------------------------------------ records */

/*
 * INDEX is the field's index constant (F_* for a message, R_* for a record) that handlers use
 * with proto_msg.f[] and PROTO_REC; member is its name in the typed C struct; KIND and arg:
 *   U, I (0)        unsigned / signed integer           C: uint64_t / int64_t
 *   ID (0)          16-byte id                          C: spw_id
 *   OPT_ID (0)      id or nil                           C: const spw_id * (NULL: nil)
 *   BIN (n)         byte string of exactly n bytes      C: proto_bytes
 *   OPT_BIN (0)     byte string or nil                  C: proto_bytes (ptr NULL: nil)
 *   DATA (0)        object payload, the frame's last field; C: proto_bytes (ptr NULL: only
 *                   the header is written and the bytes follow by proto_conn_send_borrowed)
 *   STR (max)       string of at most max bytes         C: const char * (NULL: "", longer:
 *                                                          cut to max)
 *   REC (kind)      one record of that kind, or nil     C: const proto_kind_rec * (NULL: nil)
 *   RECS (kind)     array of records of that kind       C: proto_kind_recs
 *   BATCH (kind)    RECS, for the batched messages (TASK_RUNS...): a record that does not
 *                   match its kind is marked bad (proto_val.bad on its first field, which
 *                   holds the record's first value if that one could be read) instead of
 *                   failing the whole frame, so each record is answered on its own
 *   LIST_U (min)    array of at least min u64           C: proto_u64s
 *   LIST_ID (0)     array of ids                        C: proto_ids
 */

/* What a worker announces about itself in HELLO. */
#define PROTO_REC_FIELDS_WINFO(F, N)                                                               \
    F(R_WINFO_ADDR, addr, STR, PROTO_MAX_NAME)                                                     \
    F(R_WINFO_SLOTS, slots, U, 0)                                                                  \
    F(R_WINFO_CAPACITY, capacity, U, 0)                                                            \
    F(R_WINFO_HOSTID, host_id, STR, PROTO_MAX_NAME)                                                \
    F(R_WINFO_LOCAL, local, STR, PROTO_MAX_NAME)

/* A worker holding an object. */
#define PROTO_REC_FIELDS_LOC(F, N)                                                                 \
    F(R_LOC_WORKER, worker, U, 0)                                                                  \
    F(R_LOC_ADDR, addr, STR, PROTO_MAX_NAME)                                                       \
    F(R_LOC_HOSTID, host_id, STR, PROTO_MAX_NAME)                                                  \
    F(R_LOC_LOCAL, local, STR, PROTO_MAX_NAME)

/* A task of a SUBMIT. */
#define PROTO_REC_FIELDS_TASK(F, N)                                                                \
    F(R_TASK_ID, id, ID, 0)                                                                        \
    F(R_TASK_FN, fn, STR, PROTO_MAX_NAME)                                                          \
    F(R_TASK_ARGS, args, RECS, arg)                                                                \
    F(R_TASK_FLAGS, flags, U, 0)                                                                   \
    F(R_TASK_SITE, site, STR, PROTO_MAX_NAME)                                                      \
    N(R_TASK_WORKER, worker, STR, PROTO_MAX_NAME) /* run only on the worker of this name */     \
    N(R_TASK_NOUTS, nouts, U, 0) /* outputs it makes (absent or 0: 1) */

/* A task argument as the client sends it: inline bytes, or an object (or a view of one). */
#define PROTO_REC_FIELDS_ARG(F, N)                                                                 \
    F(R_ARG_KIND, kind, U, 0) /* PROTO_ARG_* */                                                    \
    F(R_ARG_INLINE, value, OPT_BIN, 0)                                                             \
    F(R_ARG_OBJ, obj, OPT_ID, 0)                                                                   \
    F(R_ARG_OFF, off, U, 0)                                                                        \
    F(R_ARG_LEN, len, U, 0)

/* A task argument as the scheduler sends it to a worker, with where the object is. */
#define PROTO_REC_FIELDS_WARG(F, N)                                                                \
    F(R_WARG_KIND, kind, U, 0)                                                                     \
    F(R_WARG_INLINE, value, OPT_BIN, 0)                                                            \
    F(R_WARG_OBJ, obj, OPT_ID, 0)                                                                  \
    F(R_WARG_OFF, off, U, 0)                                                                       \
    F(R_WARG_LEN, len, U, 0)                                                                       \
    F(R_WARG_OBJSIZE, obj_size, U, 0)                                                              \
    F(R_WARG_LOCS, locs, RECS, loc)

/* A worker in STATUS. */
#define PROTO_REC_FIELDS_SWORKER(F, N)                                                             \
    F(R_SWORKER_ID, id, U, 0)                                                                      \
    F(R_SWORKER_ADDR, addr, STR, PROTO_MAX_NAME)                                                   \
    F(R_SWORKER_NAME, name, STR, PROTO_MAX_NAME)                                                   \
    F(R_SWORKER_SLOTS, slots, U, 0)                                                                \
    F(R_SWORKER_BUSY, busy, U, 0)                                                                  \
    F(R_SWORKER_ASSIGNED, assigned, U, 0)                                                          \
    F(R_SWORKER_STATE, state, U, 0)                                                                \
    F(R_SWORKER_STATS, stats, LIST_U, 0) /* PROTO_STAT_* */                                        \
    N(R_SWORKER_PLUGINS, plugins, RECS, plug) /* what its executors load (WORKER_PLUGINS) */

/* A client connection in STATUS. */
#define PROTO_REC_FIELDS_SCLIENT(F, N)                                                             \
    F(R_SCLIENT_SESSION, session, U, 0)                                                            \
    F(R_SCLIENT_HOST, host, STR, PROTO_MAX_NAME)                                                   \
    F(R_SCLIENT_PID, pid, U, 0)                                                                    \
    F(R_SCLIENT_ROLE, role, U, 0)                                                                  \
    F(R_SCLIENT_TASKS, tasks, U, 0)                                                                \
    F(R_SCLIENT_REFS, refs, U, 0)                                                                  \
    N(R_SCLIENT_DROP_MS, drop_ms, U, 0) /* detached: its client may resume it this many ms */

/* A task argument as a worker hands it to its executor: inline, or a range of the arena. */
#define PROTO_REC_FIELDS_EARG(F, N)                                                                \
    F(R_EARG_KIND, kind, U, 0)                                                                     \
    F(R_EARG_INLINE, value, OPT_BIN, 0)                                                            \
    F(R_EARG_OFF, off, U, 0)                                                                       \
    F(R_EARG_LEN, len, U, 0)

/* An object in MEMORY_OBJS. */
#define PROTO_REC_FIELDS_MOBJ(F, N)                                                                \
    F(R_MOBJ_ID, id, ID, 0)                                                                        \
    F(R_MOBJ_SIZE, size, U, 0)                                                                     \
    F(R_MOBJ_STATE, state, U, 0) /* PROTO_OSTATE_* */                                              \
    F(R_MOBJ_SITE, site, STR, PROTO_MAX_NAME)                                                      \
    F(R_MOBJ_OWNER_HOST, owner_host, STR, PROTO_MAX_NAME)                                          \
    F(R_MOBJ_OWNER_PID, owner_pid, U, 0)                                                           \
    F(R_MOBJ_AGE_MS, age_ms, U, 0)                                                                 \
    F(R_MOBJ_TASK_FN, task_fn, STR, PROTO_MAX_NAME) /* "" for a put */                             \
    F(R_MOBJ_REFS, refs, LIST_U, PROTO_REF_KINDS) /* by PROTO_REF_* kind */                        \
    F(R_MOBJ_HOLDERS, holders, RECS, holder)                                                       \
    F(R_MOBJ_LOCS, locs, RECS, mloc)                                                               \
    F(R_MOBJ_INLINE, is_inline, U, 0) /* 1 if the value lives in the scheduler */             \
    N(R_MOBJ_NOUTS, nouts, U, 0) /* outputs of its task, sent when more than 1: the object is  \
                                    output spw_id_output_index(id) of spw_id_output_task(id) */ \
    N(R_MOBJ_CHUNKS, chunks, U, 0) /* a chunked object (index 0) or one of its chunks (index   \
                                      1 + i of spw_id_output_task(id)): how many chunks */

/* An output of a task after its first, in TASK_DONE / EXEC_DONE (the first is in their size and
 * value fields). */
#define PROTO_REC_FIELDS_OUT(F, N)                                                                 \
    F(R_OUT_SIZE, size, U, 0)                                                                      \
    F(R_OUT_INLINE, value, OPT_BIN, 0) /* nil: in the store */

#define PROTO_REC_FIELDS_HOLDER(F, N)                                                              \
    F(R_HOLDER_KIND, kind, U, 0)                                                                   \
    F(R_HOLDER_COUNT, count, U, 0)                                                                 \
    F(R_HOLDER_WHO, who, STR, PROTO_MAX_NAME)

#define PROTO_REC_FIELDS_MLOC(F, N)                                                                \
    F(R_MLOC_WORKER, worker, U, 0)                                                                 \
    F(R_MLOC_WHERE, where, U, 0) /* OST_IN_MEMORY | OST_ON_DISK */                                 \
    F(R_MLOC_STORED, stored, U, 0)                                                                 \
    F(R_MLOC_PINS, pins, U, 0)

#define PROTO_REC_FIELDS_MNODE(F, N)                                                               \
    F(R_MNODE_ID, id, U, 0)                                                                        \
    F(R_MNODE_ADDR, addr, STR, PROTO_MAX_NAME)                                                     \
    F(R_MNODE_NAME, name, STR, PROTO_MAX_NAME)                                                     \
    F(R_MNODE_STATS, stats, LIST_U, 0) /* PROTO_STAT_* */                                          \
    F(R_MNODE_FRESH, fresh, U, 0)

#define PROTO_REC_FIELDS_OLOBJ(F, N)                                                               \
    F(R_OLOBJ_ID, id, ID, 0)                                                                       \
    F(R_OLOBJ_SIZE, size, U, 0)                                                                    \
    F(R_OLOBJ_WHERE, where, U, 0)                                                                  \
    F(R_OLOBJ_STORED, stored, U, 0)                                                                \
    F(R_OLOBJ_PINS, pins, U, 0)

/* A graph in GRAPHS. */
#define PROTO_REC_FIELDS_GRAPH(F, N)                                                               \
    F(R_GRAPH_SESSION, session, U, 0)                                                              \
    F(R_GRAPH_ID, id, U, 0)                                                                        \
    F(R_GRAPH_HOST, host, STR, PROTO_MAX_NAME)                                                     \
    F(R_GRAPH_PID, pid, U, 0)                                                                      \
    F(R_GRAPH_SITE, site, STR, PROTO_MAX_NAME) /* call site of the submit ("" if unknown) */       \
    F(R_GRAPH_AGE_MS, age_ms, U, 0)                                                                \
    F(R_GRAPH_COUNTS, counts, LIST_U, PROTO_TSTATE_COUNT) /* tasks in each PROTO_TSTATE_* */       \
    F(R_GRAPH_LIVE, live, U, 0) /* bytes of outputs in flight and not yet consumed */              \
    F(R_GRAPH_MAX_BYTES, max_bytes, U, 0) /* its cap on those (0: none) */                         \
    F(R_GRAPH_ENDED_MS, ended_ms, U, 0) /* age when its last task finished; 0: unfinished */    \
    N(R_GRAPH_NO, no, U, 0) /* the scheduler's number for it, unique in the cluster (R_GRAPH_ID \
                               is the client's, unique per client) */

/* A plugin a worker's executors load: its hash, its own name (spw_plugin.name) and size. */
#define PROTO_REC_FIELDS_PLUG(F, N)                                                                \
    F(R_PLUG_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)                                               \
    F(R_PLUG_NAME, name, STR, PROTO_MAX_NAME)                                                      \
    F(R_PLUG_SIZE, size, U, 0)                                                                     \
    F(R_PLUG_UPLOADED, uploaded, U, 0) /* 1: uploaded by a client; 0: --plugin */

/* An uploaded plugin in PLUGINS (spillway-ctl plugins). */
#define PROTO_REC_FIELDS_SPLUG(F, N)                                                               \
    F(R_SPLUG_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)                                              \
    F(R_SPLUG_NAME, name, STR, PROTO_MAX_NAME)                                                     \
    F(R_SPLUG_SIZE, size, U, 0)                                                                    \
    F(R_SPLUG_OBJ, obj, ID, 0)                                                                     \
    F(R_SPLUG_STATE, state, U, 0) /* PROTO_PLUGIN_* */                                             \
    F(R_SPLUG_FNS, fns, U, 0) /* functions it exports */                                           \
    F(R_SPLUG_CLIENTS, clients, U, 0) /* references from client connections */                     \
    F(R_SPLUG_GRAPHS, graphs, U, 0) /* references from graphs with tasks left */                   \
    F(R_SPLUG_COPIES, copies, U, 0) /* stores holding its bytes */

/* One byte range of a striped REPLICATE and the workers to fetch it from, first one first (it
 * may still be receiving that range: it forwards it as it comes). */
#define PROTO_REC_FIELDS_STRIPE(F, N)                                                              \
    F(R_STRIPE_OFF, off, U, 0)                                                                     \
    F(R_STRIPE_LEN, len, U, 0)                                                                     \
    F(R_STRIPE_LOCS, locs, RECS, loc)

/* ----------------------------------------------------------------- messages */

#define PROTO_FIELDS_CHALLENGE(F, N)                                                               \
    F(F_CHAL_VERSION, version, U, 0)                                                               \
    F(F_CHAL_NONCE, nonce, BIN, PROTO_NONCE_LEN)                                                   \
    F(F_CHAL_ROLE, role, U, 0)

#define PROTO_FIELDS_HELLO(F, N)                                                                   \
    F(F_HELLO_VERSION, version, U, 0)                                                              \
    F(F_HELLO_ROLE, role, U, 0)                                                                    \
    F(F_HELLO_NONCE, nonce, BIN, PROTO_NONCE_LEN)                                                  \
    F(F_HELLO_PROOF, proof, BIN, PROTO_PROOF_LEN)                                                  \
    F(F_HELLO_PID, pid, U, 0)                                                                      \
    F(F_HELLO_HOST, host, STR, PROTO_MAX_NAME)                                                     \
    F(F_HELLO_NAME, name, STR, PROTO_MAX_NAME)                                                     \
    F(F_HELLO_WORKER, worker, REC, winfo) /* nil unless a worker says hello */              \
    N(F_HELLO_RESUME, resume, U, 0) /* a client that can resume: the session to resume, or 0  \
                                     * (nil: it cannot; its session ends with its connection) */\
    N(F_HELLO_TOKEN, token, BIN, PROTO_TOKEN_LEN) /* that session's token (WELCOME's)       */

#define PROTO_FIELDS_WELCOME(F, N)                                                                 \
    F(F_WELCOME_PROOF, proof, BIN, PROTO_PROOF_LEN)                                                \
    F(F_WELCOME_SESSION, session, U, 0)                                                            \
    F(F_WELCOME_INLINE_LIMIT, inline_limit, U, 0)                                                  \
    F(F_WELCOME_CHUNK, chunk, U, 0)                                                                \
    F(F_WELCOME_MAX_FRAME, max_frame, U, 0)                                                        \
    N(F_WELCOME_TOKEN, token, BIN, PROTO_TOKEN_LEN) /* a resumable session: its token */     \
    N(F_WELCOME_RESUMED, resumed, U, 0) /* 1: HELLO's session goes on; 0: a new one */      \
    N(F_WELCOME_NRECV, nrecv, U, 0) /* resumed: the client's frames it has processed */

#define PROTO_FIELDS_ERROR(F, N)                                                                   \
    F(F_ERROR_CODE, code, I, 0)                                                                    \
    F(F_ERROR_MSG, msg, STR, PROTO_MAX_STR)

#define PROTO_FIELDS_OK(F, N) F(F_OK_VALUE, value, U, 0)

#define PROTO_FIELDS_PUT_PLACE(F, N)                                                               \
    F(F_PUTP_ID, id, ID, 0)                                                                        \
    F(F_PUTP_SIZE, size, U, 0)                                                                     \
    F(F_PUTP_SITE, site, STR, PROTO_MAX_NAME)                                                      \
    F(F_PUTP_FLAGS, flags, U, 0) /* PROTO_PUT_* */                                                 \
    N(F_PUTP_HOSTID, host_id, STR, PROTO_MAX_NAME) /* the client's host: prefer it */      \
    N(F_PUTP_CHUNK_MAX, chunk_max, U, 0) /* PROTO_PUT_MAY_CHUNK: largest chunk the client      \
                                            wants (0: the scheduler chooses) */

#define PROTO_FIELDS_PUT_TARGET(F, N)                                                              \
    F(F_PUTT_ID, id, ID, 0)                                                                        \
    F(F_PUTT_WORKER, worker, U, 0)                                                                 \
    F(F_PUTT_ADDR, addr, STR, PROTO_MAX_NAME)                                                      \
    F(F_PUTT_HOSTID, host_id, STR, PROTO_MAX_NAME)                                                 \
    F(F_PUTT_LOCAL, local, STR, PROTO_MAX_NAME)                                                    \
    F(F_PUTT_EXISTS, exists, U, 0)                                                                 \
    N(F_PUTT_CHUNK, chunk, U, 0) /* not 0: put it as chunks of this many bytes (a chunked      \
                                    object, PROTO_PUT_CHUNK); sent only for PROTO_PUT_MAY_CHUNK */

#define PROTO_FIELDS_LOCATE(F, N)                                                                  \
    F(F_LOCATE_ID, id, ID, 0)                                                                      \
    F(F_LOCATE_TIMEOUT_MS, timeout_ms, U, 0)

#define PROTO_FIELDS_LOCATION(F, N)                                                                \
    F(F_LOC_ID, id, ID, 0)                                                                         \
    F(F_LOC_STATUS, status, I, 0)                                                                  \
    F(F_LOC_SIZE, size, U, 0)                                                                      \
    F(F_LOC_INLINE, value, OPT_BIN, 0)                                                             \
    F(F_LOC_ERR, err, STR, PROTO_MAX_STR)                                                          \
    F(F_LOC_LOCS, locs, RECS, loc)                                                                 \
    N(F_LOC_CHUNK, chunk, U, 0) /* a chunked object: its chunks' size (chunk i, of at most     \
                                   that many bytes, is spw_id_output(id, 1 + i)) */

#define PROTO_FIELDS_RELEASE(F, N) F(F_RELEASE_IDS, ids, LIST_ID, 0)

#define PROTO_FIELDS_SUBMIT(F, N)                                                                  \
    F(F_SUBMIT_GRAPH, graph, U, 0)                                                                 \
    F(F_SUBMIT_FLAGS, flags, U, 0) /* PROTO_SUBMIT_* */                                            \
    F(F_SUBMIT_MAX_TASKS, max_tasks, U, 0)                                                         \
    F(F_SUBMIT_MAX_BYTES, max_bytes, U, 0)                                                         \
    F(F_SUBMIT_TASKS, tasks, RECS, task)                                                           \
    N(F_SUBMIT_SITE, site, STR, PROTO_MAX_NAME) /* call site of the submit, in the last frame */

#define PROTO_FIELDS_SUBMIT_ACK(F, N)                                                              \
    F(F_SUBACK_GRAPH, graph, U, 0)                                                                 \
    F(F_SUBACK_NTASKS, ntasks, U, 0)

/* The per-task messages TASK_RESULT, TASK_RUN, TASK_DONE (and EXEC_DONE) and EXEC each have a
 * record kind with the same fields in the same order (TRES, RUN, DONE, EXEC), of which the
 * batched messages (TASK_RESULTS, TASK_RUNS, TASK_DONES, EXEC_DONES, EXECS) carry an array: one
 * field list, PROTO__FIELDS_x(F, N, P), gives both, with index prefix P (F_x_ for the message,
 * R_x_ for the record), so F_DONE_ID == R_DONE_ID and a handler reads either with F_*. */
#define PROTO__FIELDS_TRES(F, N, P)                                                                \
    F(P##ID, id, ID, 0)                                                                            \
    F(P##STATUS, status, I, 0)                                                                     \
    F(P##SIZE, size, U, 0)                                                                         \
    F(P##INLINE, value, OPT_BIN, 0)                                                                \
    F(P##ERR, err, STR, PROTO_MAX_STR)
#define PROTO_FIELDS_TASK_RESULT(F, N) PROTO__FIELDS_TRES(F, N, F_TRES_)
#define PROTO_REC_FIELDS_TRES(F, N) PROTO__FIELDS_TRES(F, N, R_TRES_)

#define PROTO__FIELDS_RUN(F, N, P)                                                                 \
    F(P##ID, id, ID, 0)                                                                            \
    F(P##FN, fn, STR, PROTO_MAX_NAME)                                                              \
    F(P##ARGS, args, RECS, warg)                                                                   \
    F(P##FLAGS, flags, U, 0)                                                                       \
    N(P##NOUTS, nouts, U, 0) /* outputs it makes (absent or 0: 1) */
#define PROTO_FIELDS_TASK_RUN(F, N) PROTO__FIELDS_RUN(F, N, F_RUN_)
#define PROTO_REC_FIELDS_RUN(F, N) PROTO__FIELDS_RUN(F, N, R_RUN_)

/* TASK_DONE, worker -> scheduler; EXEC_DONE, executor -> worker, has the same fields. */
#define PROTO__FIELDS_DONE(F, N, P)                                                                \
    F(P##ID, id, ID, 0)                                                                            \
    F(P##STATUS, status, I, 0)                                                                     \
    F(P##SIZE, size, U, 0)                                                                         \
    F(P##INLINE, value, OPT_BIN, 0)                                                                \
    F(P##ERR, err, STR, PROTO_MAX_STR)                                                             \
    F(P##RUN_US, run_us, U, 0)                                                                     \
    N(P##OUTS, outs, RECS, out) /* outputs 1.. of a task of several (absent: it has one) */
#define PROTO_FIELDS_TASK_DONE(F, N) PROTO__FIELDS_DONE(F, N, F_DONE_)
#define PROTO_REC_FIELDS_DONE(F, N) PROTO__FIELDS_DONE(F, N, R_DONE_)

#define PROTO_FIELDS_OBJ_ADDED(F, N)                                                               \
    F(F_ADDED_ID, id, ID, 0)                                                                       \
    F(F_ADDED_SIZE, size, U, 0)

#define PROTO_FIELDS_OBJ_DELETE(F, N) F(F_DELETE_IDS, ids, LIST_ID, 0)

/* HEARTBEAT: the worker's store figures, indexes PROTO_STAT_*; those added since
 * PROTO_STAT_SPILL_AT may be absent. */
#define PROTO_FIELDS_HEARTBEAT(F, N) F(F_HB_STATS, stats, LIST_U, PROTO_STAT_SPILL_AT)

#define PROTO_FIELDS_OBJ_WRITE(F, N)                                                               \
    F(F_WRITE_ID, id, ID, 0)                                                                       \
    F(F_WRITE_TOTAL, total, U, 0)                                                                  \
    F(F_WRITE_OFF, off, U, 0)                                                                      \
    F(F_WRITE_FLAGS, flags, U, 0) /* PROTO_CHUNK_* */                                              \
    F(F_WRITE_DATA, data, DATA, 0)

#define PROTO_FIELDS_OBJ_READ(F, N)                                                                \
    F(F_READ_ID, id, ID, 0)                                                                        \
    F(F_READ_OFF, off, U, 0)                                                                       \
    F(F_READ_LEN, len, U, 0)                                                                       \
    N(F_READ_FLAGS, flags, U, 0) /* PROTO_READ_* */

#define PROTO_FIELDS_OBJ_DATA(F, N)                                                                \
    F(F_DATA_ID, id, ID, 0)                                                                        \
    F(F_DATA_TOTAL, total, U, 0)                                                                   \
    F(F_DATA_OFF, off, U, 0)                                                                       \
    F(F_DATA_FLAGS, flags, U, 0) /* PROTO_CHUNK_* */                                               \
    F(F_DATA_DATA, data, DATA, 0)

#define PROTO_FIELDS_PUT_DONE(F, N) F(F_PUTDONE_ID, id, ID, 0)

/* Local (same-host) access to a worker's arena, over its Unix socket. */
#define PROTO_FIELDS_ARENA_MAP(F, N) F(F_AMAP_FLAGS, flags, U, 0) /* PROTO_ARENA_* */
/* The memfd rides along as SCM_RIGHTS. */
#define PROTO_FIELDS_ARENA(F, N) F(F_ARENA_CAPACITY, capacity, U, 0)
#define PROTO_FIELDS_OBJ_PIN(F, N) F(F_PIN_ID, id, ID, 0)
#define PROTO_FIELDS_PINNED(F, N)                                                                  \
    F(F_PINNED_ID, id, ID, 0)                                                                      \
    F(F_PINNED_OFF, off, U, 0)                                                                     \
    F(F_PINNED_SIZE, size, U, 0)
#define PROTO_FIELDS_OBJ_UNPIN(F, N) F(F_UNPIN_ID, id, ID, 0)
#define PROTO_FIELDS_OBJ_CREATE(F, N)                                                              \
    F(F_CREATE_ID, id, ID, 0)                                                                      \
    F(F_CREATE_SIZE, size, U, 0)
#define PROTO_FIELDS_CREATED(F, N)                                                                 \
    F(F_CREATED_ID, id, ID, 0)                                                                     \
    F(F_CREATED_OFF, off, U, 0)
#define PROTO_FIELDS_OBJ_SEAL(F, N) F(F_SEAL_ID, id, ID, 0)

#define PROTO_FIELDS_STATUS(F, N)                                                                  \
    F(F_STATUS_NOW_MS, now_ms, U, 0)                                                               \
    F(F_STATUS_UPTIME_MS, uptime_ms, U, 0)                                                         \
    F(F_STATUS_LISTEN, listen, STR, PROTO_MAX_NAME)                                                \
    F(F_STATUS_WORKERS, workers, RECS, sworker)                                                    \
    F(F_STATUS_CLIENTS, clients, RECS, sclient)                                                    \
    F(F_STATUS_TASKS, tasks, LIST_U, PROTO_TSTATE_COUNT) /* by PROTO_TSTATE_* */                   \
    F(F_STATUS_OBJECTS, objects, U, 0)                                                             \
    F(F_STATUS_OBJ_BYTES, obj_bytes, U, 0)                                                         \
    /* Added for /metrics; an older scheduler leaves them out. */                                  \
    N(F_STATUS_REFS, refs, LIST_U, 0) /* references held, by PROTO_REF_* kind */                   \
    N(F_STATUS_CONNS, conns, LIST_U, 0) /* connections by PROTO_ROLE_* */                          \
    N(F_STATUS_IO, io, LIST_U, 0) /* PROTO_IO_* (conn.h): frames and bytes in and out */           \
    N(F_STATUS_LATENCY, latency, LIST_U, 0) /* tasks finished per PROTO_LATENCY_BOUNDS_MS         \
                                               bucket (the last is +Inf), then the sum of their   \
                                               latencies in microseconds */                       \
    N(F_STATUS_LINEAGE, lineage, LIST_U, 0) /* PROTO_LINEAGE_*: tasks run again to re-make lost  \
                                               outputs, objects lost for good */

/* spillway-ctl memory. The reply is any number of MEMORY_OBJS frames, then MEMORY_END. */
#define PROTO_FIELDS_MEMORY_REQ(F, N) F(F_MEMREQ_FLAGS, flags, U, 0)
#define PROTO_FIELDS_MEMORY_OBJS(F, N) F(F_MEMOBJS_OBJS, objs, RECS, mobj)
#define PROTO_FIELDS_MEMORY_END(F, N)                                                              \
    F(F_MEMEND_NODES, nodes, RECS, mnode)                                                          \
    F(F_MEMEND_COMPLETE, complete, U, 0) /* 0 if a worker did not answer */
#define PROTO_FIELDS_OBJ_LIST_REQ(F, N) F(F_OLISTREQ_FLAGS, flags, U, 0)
/* A store's list may come in several OBJ_LIST frames: all but the last say more = 1. */
#define PROTO_FIELDS_OBJ_LIST(F, N)                                                                \
    F(F_OLIST_OBJS, objs, RECS, olobj)                                                             \
    F(F_OLIST_STATS, stats, LIST_U, 0) /* PROTO_STAT_* */                                          \
    N(F_OLIST_MORE, more, U, 0)        /* 1: more frames of this list follow */

/* Broadcast: client -> scheduler BROADCAST, scheduler -> workers REPLICATE (fetch it from the
 * first of locs, which may still be receiving it: a pipelined chain), workers answer OBJ_ADDED
 * or ERROR, scheduler -> client BROADCAST_DONE. */
#define PROTO_FIELDS_BROADCAST(F, N)                                                               \
    F(F_BCAST_ID, id, ID, 0)                                                                       \
    F(F_BCAST_WORKERS, workers, U, 0) /* 0 = all */                                                \
    N(F_BCAST_KEEP, keep, U, 0) /* 1: keep that many copies (a put with replicas): a holder lost  \
                                   or drained is replaced while workers remain */
#define PROTO_FIELDS_BROADCAST_DONE(F, N)                                                          \
    F(F_BCDONE_ID, id, ID, 0)                                                                      \
    F(F_BCDONE_COPIES, copies, U, 0)                                                               \
    F(F_BCDONE_FAILED, failed, U, 0)
#define PROTO_FIELDS_REPLICATE(F, N)                                                               \
    F(F_REPL_ID, id, ID, 0)                                                                        \
    F(F_REPL_SIZE, size, U, 0)                                                                     \
    F(F_REPL_LOCS, locs, RECS, loc)                                                                \
    N(F_REPL_STRIPES, stripes, RECS, stripe) /* absent or empty: the whole object from locs; else \
                                                ranges in order covering it, each fetched from \
                                                its own sources at once */

/* Draining a worker: it takes no more tasks, and every object of which it holds the only copy is
 * copied to other workers. A worker sends DRAIN (0, "") for itself, spillway-ctl names one by id
 * or, with id 0, by name; the scheduler answers OK (value: the copies made) once the worker is
 * drained, or ERROR. */
#define PROTO_FIELDS_DRAIN(F, N)                                                                   \
    F(F_DRAIN_WORKER, worker, U, 0)                                                                \
    F(F_DRAIN_NAME, name, STR, PROTO_MAX_NAME)

/* OBJS_HELD, worker -> scheduler, right after it registers again: the sealed objects its store
 * kept from before its scheduler connection was lost, in frames like OBJ_LIST's (more = 1: more
 * follow). The scheduler answers OBJ_DELETE for those it does not know and, after the last
 * frame, OK (same request id): the others are claimed, listed as copies on that worker. */
#define PROTO_FIELDS_OBJS_HELD(F, N)                                                               \
    F(F_HELD_OBJS, objs, RECS, olobj)                                                              \
    F(F_HELD_MORE, more, U, 0)

/* Worker <-> executor. */
#define PROTO__FIELDS_EXEC(F, N, P)                                                                \
    F(P##ID, id, ID, 0)                                                                            \
    F(P##FN, fn, STR, PROTO_MAX_NAME)                                                              \
    F(P##ARGS, args, RECS, earg)                                                                   \
    F(P##INLINE_LIMIT, inline_limit, U, 0)                                                         \
    N(P##NOUTS, nouts, U, 0) /* outputs it must write (absent or 0: 1) */
#define PROTO_FIELDS_EXEC(F, N) PROTO__FIELDS_EXEC(F, N, F_EXEC_)
#define PROTO_REC_FIELDS_EXEC(F, N) PROTO__FIELDS_EXEC(F, N, R_EXEC_)
#define PROTO_FIELDS_EXEC_ALLOC(F, N)                                                              \
    F(F_EALLOC_ID, id, ID, 0)                                                                      \
    F(F_EALLOC_SIZE, size, U, 0)                                                                   \
    N(F_EALLOC_INDEX, index, U, 0) /* which output (absent: 0) */
#define PROTO_FIELDS_EXEC_ALLOC_OK(F, N) F(F_EALLOCOK_OFF, off, U, 0)

/* Task start notices, worker -> scheduler: the tasks an executor has begun (batched). */
#define PROTO_FIELDS_TASK_STARTED(F, N) F(F_STARTED_IDS, ids, LIST_ID, 0)
/* Graph progress: GRAPHS_REQ {session, graph} (0 = any) -> GRAPHS {records R_GRAPH}. */
#define PROTO_FIELDS_GRAPHS_REQ(F, N)                                                              \
    F(F_GREQ_SESSION, session, U, 0)                                                               \
    F(F_GREQ_GRAPH, graph, U, 0)
#define PROTO_FIELDS_GRAPHS(F, N) F(F_GRAPHS_GRAPHS, graphs, RECS, graph)
/* TASK_CANCEL (scheduler -> worker): tasks of a client that went away; those not started are
 * dropped and answered TASK_DONE with SPW_ECANCELED. */
#define PROTO_FIELDS_TASK_CANCEL(F, N) F(F_CANCEL_IDS, ids, LIST_ID, 0)
/* Batched per-task messages: what one loop iteration of the sender produces for one peer, up to
 * PROTO_BATCH_MAX_RECS records or about PROTO_BATCH_MAX_BYTES per frame (proto_batch, conn.h
 * proto_conn_batch_*). Each record is handled as the single message of the same fields would
 * be, and answered on its own when bad. */
#define PROTO_FIELDS_TASK_RUNS(F, N) F(F_RUNS_RECS, recs, BATCH, run)
#define PROTO_FIELDS_TASK_DONES(F, N) F(F_DONES_RECS, recs, BATCH, done)
#define PROTO_FIELDS_TASK_RESULTS(F, N) F(F_TRESS_RECS, recs, BATCH, tres)
#define PROTO_FIELDS_EXECS(F, N) F(F_EXECS_RECS, recs, BATCH, exec)
/* Uploaded plugins (proto.h). A client adds one with PLUGIN_ADD, answered PLUGIN_CHECKED once a
 * worker holding its bytes loaded it in a process of its own (PLUGIN_CHECK, answered with
 * PLUGIN_CHECKED), or ERROR (SPW_ENOOBJ: put its bytes first, then add again). A worker that
 * needs one asks PLUGIN_GET by prefix, answered PLUGIN_INFO (where its bytes are). The worker
 * tells an executor to load a plugin from its cache with PLUGIN_LOAD, and tells the scheduler
 * which plugins its executors load with WORKER_PLUGINS. */
#define PROTO_FIELDS_PLUGIN_ADD(F, N)                                                              \
    F(F_PADD_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)                                               \
    F(F_PADD_SIZE, size, U, 0)                                                                     \
    F(F_PADD_NAME, name, STR, PROTO_MAX_NAME) /* the client's name for it (a file name) */         \
    F(F_PADD_SITE, site, STR, PROTO_MAX_NAME)
#define PROTO_FIELDS_PLUGIN_CHECKED(F, N)                                                          \
    F(F_PCHK_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)                                               \
    F(F_PCHK_STATUS, status, I, 0)                                                                 \
    F(F_PCHK_MSG, msg, STR, PROTO_MAX_STR) /* why it was refused */                                \
    F(F_PCHK_NAME, name, STR, PROTO_MAX_NAME) /* the plugin's own name (spw_plugin.name) */        \
    F(F_PCHK_FNS, fns, U, 0)
#define PROTO_FIELDS_PLUGIN_RELEASE(F, N) F(F_PREL_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)
#define PROTO_FIELDS_PLUGIN_GET(F, N) F(F_PGET_PREFIX, prefix, STR, PROTO_PLUGIN_HEX_LEN)
#define PROTO_FIELDS_PLUGIN_INFO(F, N)                                                             \
    F(F_PINFO_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)                                              \
    F(F_PINFO_NAME, name, STR, PROTO_MAX_NAME)                                                     \
    F(F_PINFO_SIZE, size, U, 0)                                                                    \
    F(F_PINFO_OBJ, obj, ID, 0)                                                                     \
    F(F_PINFO_LOCS, locs, RECS, loc)
#define PROTO_FIELDS_PLUGINS(F, N) F(F_PLUGINS_PLUGINS, plugins, RECS, splug)
#define PROTO_FIELDS_PLUGIN_LOAD(F, N)                                                             \
    F(F_PLOAD_HASH, hash, BIN, PROTO_PLUGIN_HASH_LEN)                                              \
    F(F_PLOAD_PATH, path, STR, PROTO_MAX_STR)
#define PROTO_FIELDS_WORKER_PLUGINS(F, N)                                                          \
    F(F_WPLUG_PLUGINS, plugins, RECS, plug)                                                        \
    N(F_WPLUG_NO_UPLOADS, no_uploads, U, 0) /* 1: it runs no uploaded plugin                      \
                                               (--allow-plugin-upload no); absent: 0 */
/* clang-format on */

#endif /* SPW_PROTO_SCHEMA_H */
