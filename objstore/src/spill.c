/*
 * Spilling to LMDB with zstd, and restoring.
 *
 * Owns the LMDB environment (in a private directory whose files are unlinked at once, so a
 * crashed worker leaves no spill files behind) and `nlanes` lanes (opts spill_threads), each
 * with its own zstd contexts and scratch buffer. Jobs (spill, restore, delete, and the reset and
 * compaction that hand disk back) run on the libuv threadpool as parts, one per lane: restores
 * first, then spills and deletions in order, never two at once for the same object id; a job of
 * several chunks takes more lanes as they come free, so one large object keeps every lane busy.
 * Threads: a job's work function touches only its job, its lane and LMDB; objects, figures and
 * lists are touched on the loop thread, in the after-work callback.
 * Invariants: an object is `spilling` iff a spill job for it is queued or running, and
 * `restoring` iff a restore is waiting for memory or queued or running; spilled_raw and
 * spilled_stored are the sums over objects with on_disk; spill_entries is the number of records
 * in LMDB (0 once every spilled object is released).
 */
#include "store_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <lmdb.h>
#include <utlist.h>
#include <zstd.h>

#include "spill_record.h"

#define CHUNK OST_SPILL_CHUNK      /* raw bytes per record */
#define KEY_LEN 28                /* object id (16) + copy (8) + chunk index (4), big-endian */
#define COMPACT_FACTOR 2          /* compact when disk blocks > FACTOR x live + SLACK */
#define COMPACT_SLACK (64ULL << 20)

enum job_kind { JOB_SPILL, JOB_RESTORE, JOB_DELETE, JOB_RESET, JOB_COMPACT, JOB_READ };

/* A job runs as one or more parts, each on a lane of its own: a spill or restore of several
 * chunks takes more lanes as they come free, each part claiming the next chunk not yet taken
 * (next_chunk) until none is left, so one large object keeps every lane busy. The fields a
 * part writes while others run are atomic: the first failure wins, and the last part to leave
 * (active reaching 0) takes back what a failed spill wrote. */
typedef struct spill_job {
    ost_store *s;
    int kind;
    ost_obj *o;          /* SPILL, RESTORE */
    spw_id id;
    uint64_t copy;       /* SPILL, RESTORE, DELETE: the object's spilled copy (make_key) */
    uint64_t size;       /* raw bytes of the object */
    const uint8_t *src;  /* SPILL: the object's bytes in the arena */
    uint8_t *dst;        /* RESTORE: its new block; READ: the caller's buffer */
    uint64_t off, len;   /* READ: the range of the object read into dst */
    ost_cb cb;           /* READ: called when done */
    void *cb_arg;
    _Atomic int status;
    _Atomic int mdb_rc;  /* LMDB's own code, for the one log line */
    _Atomic uint64_t stored; /* SPILL: bytes written */
    _Atomic uint32_t next_chunk; /* SPILL, RESTORE: chunks claimed by parts */
    _Atomic uint32_t active;     /* parts inside their work function (or about to be) */
    bool left_behind;    /* SPILL: a failed spill's take-back did not commit (last part) */
    bool took_back;      /* SPILL: the last part saw the failure and took back the chunks */
    uint32_t nparts;     /* parts started whose after-work callback has not run (loop) */
    struct spill_job *next; /* in a queue, or in `running` */
} spill_job;

typedef struct spill_part {
    uv_work_t req;
    spill_job *job;
    uint32_t lane;       /* index into the lanes, taken by the part itself (lane_take) */
    uint32_t first;      /* SPILL, RESTORE: the chunk claimed for it when it was started */
    uint64_t t_queued;   /* trace: when the loop queued it */
} spill_part;

typedef struct spill_lane {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *scratch;    /* one compressed chunk */
    bool busy;           /* a part holds the lane (lane_mu) */
    /* SPW_SPILL_TRACE: where the lane's time goes (written by its part, read at close) */
    uint64_t tr_busy, tr_trim, tr_idle, tr_wait, tr_end, tr_parts;
    uint64_t tr_zstd[2], tr_lock[2], tr_txn[2], tr_chunks[2]; /* [1]: stored raw */
} spill_lane;

struct ost_spill {
    /* Written only by the reset and compaction jobs, which run alone (exclusive): the loop
     * thread may read it whenever neither runs. */
    MDB_env *env;
    MDB_dbi dbi;
    spill_lane *lanes;
    uint32_t nlanes;
    uint32_t nrunning;          /* jobs on the threadpool */
    uint32_t nspills, nrestores; /* of those, spills and restores (for the wall-time figures) */
    uint64_t spill_t0, restore_t0; /* when the running spills (restores) began to run */
    bool exclusive;             /* a reset or compaction runs: nothing else starts */
    bool grow_wanted;           /* a spill found the map full: grow it once the lanes drain */
    size_t scratch_cap;
    uint64_t map_size;
    uint64_t map_max;       /* 0: no limit but the disk */
    int level;
    spill_job *restores, *work; /* queues; restores go first */
    spill_job *running;         /* jobs on the threadpool */
    uint64_t spilling_bytes;    /* in queued or running spill jobs */
    uint64_t copies;            /* spilled copies numbered so far (make_key) */
    bool full;                  /* the map cannot grow or the disk is full */
    bool active;                /* a spill episode: above the threshold, not yet at target */
    bool quiescing;
    void (*idle_cb)(void *arg);
    void *idle_arg;
    char *dir;                  /* the spill directory given (the environment is inside it) */
    bool written;               /* something was written since the environment was opened */
    bool retrying;              /* `full` was lifted to try again (spill_retry_ms) */
    uint64_t full_ns;           /* when a spill last failed (spill_retry_ms counts from it) */
    bool resetting;             /* a reset job is queued or running */
    bool compacting;            /* a compaction job is queued or running */
    bool reset_keeps_full;      /* a failed spill left records: the reset keeps its `full` */
    bool deleted;               /* a deletion finished since the last compaction check */
    uint64_t deleted_ns;        /* when the last deletion finished */
    uint64_t compact_floor;     /* disk bytes after the last compaction (or failed try) */
    uint32_t deletes_queued;    /* JOB_DELETE in `work`, not yet started */
    char full_why[512];         /* why `full`, for error texts */
    /* SPW_SPILL_TRACE set: where each lane's time went (compressing, waiting for the writer
     * lock, in the write transaction, idle with a part queued), logged or appended to its path
     * at close. */
    bool trace;
    char *trace_path;           /* its value, read once at open (NULL when off) */
    /* Parts take a lane themselves: one part more than lanes may be queued, waiting here for
     * the first lane to come free, so a lane goes on to the next chunk without a round trip
     * through the loop thread. */
    pthread_mutex_t lane_mu;
    pthread_cond_t lane_cv;
    uint32_t lane_waiters;      /* parts waiting for a lane (lane_mu) */
    uint32_t lanes_held, lanes_peak; /* lanes held now, and at most so far (lane_mu) */
};

uint32_t ost_spill_lanes(const ost_opts *o)
{
    if (o->spill_threads != 0)
        return o->spill_threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores < 1 ? 1 : cores > 4 ? 4 : (uint32_t)cores;
}

bool ost__spill_full(const ost_store *s)
{
    return s->spill != NULL && s->spill->full;
}

bool ost__spill_pending(const ost_store *s)
{
    return s->spill != NULL && s->spill->spilling_bytes > 0 && !s->spill->quiescing;
}

uint64_t ost__spilling_bytes(const ost_store *s)
{
    return s->spill != NULL ? s->spill->spilling_bytes : 0;
}

uint32_t ost__spill_peak_lanes(ost_store *s)
{
    if (s->spill == NULL)
        return 0;
    pthread_mutex_lock(&s->spill->lane_mu);
    uint32_t peak = s->spill->lanes_peak;
    pthread_mutex_unlock(&s->spill->lane_mu);
    return peak;
}

void ost__spill_set_map_size(ost_store *s, uint64_t size)
{
    if (s->spill != NULL)
        s->spill->map_size = size;
}

uint64_t ost__spill_records(ost_store *s)
{
    MDB_stat st;
    if (s->spill == NULL || s->spill->env == NULL || s->spill->nrunning != 0 ||
        mdb_env_stat(s->spill->env, &st) != 0)
        return 0;
    return st.ms_entries;
}

const char *ost_store_full_reason(const ost_store *s)
{
    return ost__spill_full(s) ? s->spill->full_why : "";
}

/* The key of a chunk of one spilled copy. The copy's number keeps the records of an object
 * deleted while in use apart from those of a later object of the same id: the deletion of the
 * old copy, queued only when its last user lets go, may come after the new copy is written. */
static void make_key(uint8_t key[KEY_LEN], spw_id id, uint64_t copy, uint32_t chunk)
{
    spw_id_to_bytes(id, key);
    for (int b = 0; b < 12; b++) /* copy, then chunk, big-endian */
        key[16 + b] = (uint8_t)(b < 8 ? copy >> (56 - 8 * b) : chunk >> (88 - 8 * b));
}

static uint32_t nchunks(uint64_t size)
{
    return (uint32_t)((size + CHUNK - 1) / CHUNK);
}

/* LMDB codes are negative too: translate them here, never let one escape. */
static int mdb_err(int rc)
{
    switch (rc) {
    case 0:
        return 0;
    case MDB_MAP_FULL:
        return SPW_ESPILLFULL;
    case ENOSPC:
        return SPW_ENOSPC;
    case MDB_NOTFOUND:
        return SPW_ECORRUPT;
    default:
        return rc > 0 ? -rc : SPW_EIO;
    }
}

/* --------------------------------------------------------------- open/close */

/* Removes private directories of dead workers left in dir by a crash between creating and
 * unlinking their files (a window of microseconds). */
static void sweep_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid;
        if (sscanf(e->d_name, "spillway-%d-", &pid) != 1 || pid <= 0)
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_MAX];
        static const char *const files[] = {"data.mdb", "lock.mdb"};
        for (size_t i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name, files[i]);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (rmdir(path) == 0)
            spw_log(SPW_LOG_NOTICE, "removed spill files left by dead worker pid=%d in %s", pid,
                    dir);
    }
    closedir(d);
}

/* Writes a compacted copy of the live records of env to priv/data.mdb. @return 0 or a code. */
static int env_copy(MDB_env *from, const char *priv)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", priv);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int rc = mdb_env_copyfd2(from, fd, MDB_CP_COMPACT);
    if (close(fd) != 0 && rc == 0)
        rc = errno;
    return rc;
}

/* Opens an LMDB environment in a new private directory under dir, then unlinks its files (LMDB
 * keeps its descriptors), so nothing outlives this process. With copy_from, the new environment
 * starts as a compacted copy of that one. Runs at start and on the threadpool (a reset or a
 * compaction). @return 0 or an LMDB code; *env is NULL on failure. */
static int env_open(const char *dir, uint64_t map_size, MDB_env *copy_from, MDB_env **env,
                    MDB_dbi *dbi)
{
    *env = NULL;
    char priv[PATH_MAX];
    if (snprintf(priv, sizeof priv, "%s/spillway-%d-XXXXXX", dir, (int)getpid()) >=
        (int)sizeof priv)
        return ENAMETOOLONG;
    if (mkdtemp(priv) == NULL)
        return errno;
    MDB_env *e = NULL;
    int rc = copy_from != NULL ? env_copy(copy_from, priv) : 0;
    if (rc == 0)
        rc = mdb_env_create(&e);
    if (rc == 0)
        rc = mdb_env_set_mapsize(e, map_size);
    /* No fsync (MDB_NOSYNC | MDB_NOMETASYNC): the file is scratch, gone with the process.
     * MDB_NOTLS: restores read in parallel, from read transactions on any pool thread. Not
     * MDB_WRITEMAP: with a writable map a full disk is a SIGBUS, not an error. */
    if (rc == 0)
        rc = mdb_env_open(e, priv, MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS | MDB_NORDAHEAD, 0600);
    MDB_txn *txn = NULL;
    if (rc == 0)
        rc = mdb_txn_begin(e, NULL, 0, &txn);
    if (rc == 0)
        rc = mdb_dbi_open(txn, NULL, 0, dbi);
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else if (txn != NULL)
        mdb_txn_abort(txn);
    char path[sizeof priv + sizeof "/data.mdb"];
    snprintf(path, sizeof path, "%s/data.mdb", priv);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock.mdb", priv);
    unlink(path);
    rmdir(priv);
    if (rc != 0) {
        if (e != NULL)
            mdb_env_close(e);
        return rc;
    }
    /* LMDB opens its main data descriptor without O_CLOEXEC: executors (spawned children)
     * would inherit it and keep the unlinked file's blocks - and the spilled data - alive. */
    int fd;
    if (mdb_env_get_fd(e, &fd) == 0) {
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0)
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
    }
    *env = e;
    return 0;
}

int ost__spill_open(ost_store *s, const char *dir)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        spw_log(SPW_LOG_ERR, "spill dir %s: %s", dir, strerror(errno));
        return -errno;
    }
    sweep_stale(dir);
    struct ost_spill *sp = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *sp);
    sp->dir = spw_strdup(SPW_MOD_OBJSTORE, dir);
    sp->level = s->opts.compression_level;
    sp->map_size = s->opts.spill_map_size != 0 ? s->opts.spill_map_size : 4 * s->capacity;
    sp->map_max = s->opts.spill_map_max;
    if (sp->map_max != 0 && sp->map_size > sp->map_max)
        sp->map_size = sp->map_max;
    sp->scratch_cap = OST_REC_HDR + ZSTD_compressBound(CHUNK);
    sp->nlanes = ost_spill_lanes(&s->opts);
    const char *tr = getenv("SPW_SPILL_TRACE");
    sp->trace = tr != NULL && *tr != '\0' && strcmp(tr, "0") != 0;
    sp->trace_path = sp->trace ? spw_strdup(SPW_MOD_OBJSTORE, tr) : NULL;
    sp->lanes = spw_calloc(SPW_MOD_OBJSTORE, sp->nlanes, sizeof *sp->lanes);
    pthread_mutex_init(&sp->lane_mu, NULL);
    pthread_cond_init(&sp->lane_cv, NULL);
    for (uint32_t i = 0; i < sp->nlanes; i++) {
        /* Its pages become resident only once the lane compresses something. */
        sp->lanes[i].scratch = spw_malloc(SPW_MOD_OBJSTORE, sp->scratch_cap);
        sp->lanes[i].cctx = ZSTD_createCCtx();
        sp->lanes[i].dctx = ZSTD_createDCtx();
    }
    s->spill = sp;
    int rc = env_open(dir, sp->map_size, NULL, &sp->env, &sp->dbi);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "spill dir %s: LMDB: %s", dir, mdb_strerror(rc));
        return mdb_err(rc);
    }
    spw_log(SPW_LOG_INFO, "store=%s spills to %s (map %llu bytes, zstd level %d, %u lanes)",
            s->name, dir, (unsigned long long)sp->map_size, sp->level, sp->nlanes);
    return 0;
}

void ost__spill_close(ost_store *s)
{
    struct ost_spill *sp = s->spill;
    if (sp == NULL)
        return;
    SPW_ASSERT(sp->running == NULL && sp->nrunning == 0);
    /* The path read at open: the environment may have changed since. */
    FILE *trf = sp->trace && sp->trace_path[0] == '/' ? fopen(sp->trace_path, "a") : NULL;
    for (uint32_t i = 0; sp->trace && i < sp->nlanes; i++) {
        spill_lane *ln = &sp->lanes[i];
        char line[512];
        snprintf(line, sizeof line,
                "store=%s spill trace lane=%u parts=%llu chunks=%llu+%llu busy_ms=%.1f "
                "zstd_ms=%.1f+%.1f lock_ms=%.1f+%.1f txn_ms=%.1f+%.1f trim_ms=%.1f "
                "idle_queued_ms=%.1f lane_wait_ms=%.1f store_spill_ms=%.1f",
                s->name, i, (unsigned long long)ln->tr_parts,
                (unsigned long long)ln->tr_chunks[0], (unsigned long long)ln->tr_chunks[1],
                (double)ln->tr_busy / 1e6, (double)ln->tr_zstd[0] / 1e6,
                (double)ln->tr_zstd[1] / 1e6, (double)ln->tr_lock[0] / 1e6,
                (double)ln->tr_lock[1] / 1e6, (double)ln->tr_txn[0] / 1e6,
                (double)ln->tr_txn[1] / 1e6, (double)ln->tr_trim / 1e6, (double)ln->tr_idle / 1e6,
                (double)ln->tr_wait / 1e6, (double)s->st.spill_ns / 1e6);
        if (trf != NULL)
            fprintf(trf, "%s\n", line);
        else
            spw_log(SPW_LOG_NOTICE, "%s", line);
    }
    if (trf != NULL)
        fclose(trf);
    spill_job *j, *tmp;
    LL_FOREACH_SAFE(sp->restores, j, tmp) spw_free(j);
    LL_FOREACH_SAFE(sp->work, j, tmp) spw_free(j);
    if (sp->env != NULL)
        mdb_env_close(sp->env);
    for (uint32_t i = 0; i < sp->nlanes; i++) {
        ZSTD_freeCCtx(sp->lanes[i].cctx);
        ZSTD_freeDCtx(sp->lanes[i].dctx);
        spw_free(sp->lanes[i].scratch);
    }
    spw_free(sp->lanes);
    pthread_mutex_destroy(&sp->lane_mu);
    pthread_cond_destroy(&sp->lane_cv);
    spw_free(sp->trace_path);
    spw_free(sp->dir);
    spw_free(sp);
    s->spill = NULL;
}

/* ---------------------------------------------------------------- the lane */

static void lane_next(ost_store *s);

/* Sets the job's status (and LMDB's code) unless another part failed first. */
static void job_fail(spill_job *j, int status, int mdb_rc)
{
    int expect = 0;
    if (atomic_compare_exchange_strong(&j->status, &expect, status))
        j->mdb_rc = mdb_rc;
}

/* The part's next chunk: the one claimed when it was started, then the next one no part has
 * taken. @return false when none is left, or when a part failed (the others stop at their
 * next chunk). */
static bool claim_chunk(spill_job *j, spill_part *p, uint32_t *chunk)
{
    if (j->status != 0)
        return false;
    if (p->first != UINT32_MAX) {
        *chunk = p->first;
        p->first = UINT32_MAX;
    } else {
        *chunk = atomic_fetch_add(&j->next_chunk, 1);
    }
    return *chunk < nchunks(j->size);
}

/* Compresses chunk i into the lane's buffer with no transaction open (lanes compress in
 * parallel), then puts it in a write transaction of its own (LMDB's one writer lock, held for
 * the put and the commit). @return 0 or a code (LMDB's in *mdb_rc). */
static int spill_chunk(spill_job *j, spill_lane *ln, uint32_t i, int *mdb_rc)
{
    struct ost_spill *sp = j->s->spill;
    uint64_t off = (uint64_t)i * CHUNK;
    size_t len = j->size - off < CHUNK ? (size_t)(j->size - off) : CHUNK;
    uint64_t t0 = sp->trace ? spw_now_ns() : 0;
    int64_t reclen =
        ost_rec_try_zstd(ln->cctx, sp->level, j->src + off, len, ln->scratch, sp->scratch_cap);
    if (reclen < 0)
        return (int)reclen;
    if (reclen == 0)
        ost_rec_raw_header(ln->scratch, j->src + off, len); /* its checksum, before the lock */
    uint64_t t1 = sp->trace ? spw_now_ns() : 0;
    uint8_t key[KEY_LEN];
    make_key(key, j->id, j->copy, i);
    MDB_val k = {KEY_LEN, key};
    MDB_txn *txn;
    int rc = mdb_txn_begin(sp->env, NULL, 0, &txn);
    uint64_t t2 = sp->trace ? spw_now_ns() : 0;
    if (rc == 0) {
        if (reclen > 0) {
            MDB_val v = {(size_t)reclen, ln->scratch};
            rc = mdb_put(txn, sp->dbi, &k, &v, 0);
        } else {
            /* Incompressible: reserve the record in LMDB and copy the bytes there once. */
            reclen = (int64_t)(OST_REC_HDR + len);
            MDB_val v = {(size_t)reclen, NULL};
            rc = mdb_put(txn, sp->dbi, &k, &v, MDB_RESERVE);
            if (rc == 0) {
                memcpy(v.mv_data, ln->scratch, OST_REC_HDR);
                memcpy((uint8_t *)v.mv_data + OST_REC_HDR, j->src + off, len);
            }
        }
        if (rc == 0)
            rc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
    }
    if (sp->trace) {
        int raw = reclen == (int64_t)(OST_REC_HDR + len);
        ln->tr_zstd[raw] += t1 - t0;
        ln->tr_lock[raw] += t2 - t1;
        ln->tr_txn[raw] += spw_now_ns() - t2;
        ln->tr_chunks[raw]++;
    }
    *mdb_rc = rc;
    if (rc != 0) {
        /* LMDB reports a short write - a full file system - as EIO: tell the truth. */
        struct statvfs vfs;
        if (rc == EIO && statvfs(sp->dir, &vfs) == 0 &&
            (uint64_t)vfs.f_bavail * vfs.f_frsize < 3ULL * CHUNK) { /* a record, with a margin */
            *mdb_rc = 0;
            return SPW_ENOSPC;
        }
        return mdb_err(rc);
    }
    j->stored += (uint64_t)reclen;
    return 0;
}

/* One part of a spill: writes chunks until none is left. The last part to leave a failed
 * spill takes back every chunk of the object already committed (by any part), so no half
 * object stays on disk. */
static void spill_work(spill_job *j, spill_part *p)
{
    struct ost_spill *sp = j->s->spill;
    spill_lane *ln = &sp->lanes[p->lane];
    uint32_t i;
    while (claim_chunk(j, p, &i)) {
        int mdb_rc = 0;
        int rc = spill_chunk(j, ln, i, &mdb_rc);
        if (rc != 0)
            job_fail(j, rc, mdb_rc);
    }
    if (atomic_fetch_sub(&j->active, 1) != 1 || j->status == 0)
        return;
    MDB_txn *txn;
    j->took_back = true;
    j->left_behind = true;
    if (mdb_txn_begin(sp->env, NULL, 0, &txn) == 0) {
        for (uint32_t c = 0; c < nchunks(j->size); c++) {
            uint8_t key[KEY_LEN];
            make_key(key, j->id, j->copy, c);
            MDB_val k = {KEY_LEN, key};
            mdb_del(txn, sp->dbi, &k, NULL); /* MDB_NOTFOUND: never written */
        }
        /* A take-back may find no room either (in a full map, freeing a large record writes a
         * free list of its pages). The spill failed for its first reason all the same: a map
         * that may grow grows and the spill is tried again under the same keys, overwriting
         * what is left; otherwise those records stay until the environment is recreated
         * (spill_done marks it written, so the reset comes once nothing live is on disk). */
        j->left_behind = mdb_txn_commit(txn) != 0;
    }
}

/* A read transaction for a part of j, or NULL with j failed and the part counted out. */
static MDB_txn *read_txn(spill_job *j)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(j->s->spill->env, NULL, MDB_RDONLY, &txn);
    if (rc == 0)
        return txn;
    job_fail(j, mdb_err(rc), rc);
    atomic_fetch_sub(&j->active, 1);
    return NULL;
}

/* Record i of j's spilled copy: true, or false with j failed (a chunk is missing). */
static bool chunk_get(spill_job *j, MDB_txn *txn, uint32_t i, MDB_val *v)
{
    uint8_t key[KEY_LEN];
    make_key(key, j->id, j->copy, i);
    MDB_val k = {KEY_LEN, key};
    int rc = mdb_get(txn, j->s->spill->dbi, &k, v);
    if (rc != 0)
        job_fail(j, SPW_ECORRUPT, rc);
    return rc == 0;
}

/* One part of a restore: decodes chunks into the object's new block until none is left. */
static void restore_work(spill_job *j, spill_part *p)
{
    struct ost_spill *sp = j->s->spill;
    MDB_txn *txn = read_txn(j);
    if (txn == NULL)
        return;
    uint32_t i;
    while (claim_chunk(j, p, &i)) {
        uint64_t off = (uint64_t)i * CHUNK;
        size_t len = j->size - off < CHUNK ? (size_t)(j->size - off) : CHUNK;
        MDB_val v;
        if (!chunk_get(j, txn, i, &v))
            break;
        /* Decoded straight out of LMDB's map, before the transaction ends. */
        int st = ost_rec_decode(sp->lanes[p->lane].dctx, v.mv_data, v.mv_size, j->dst + off, len);
        if (st != 0)
            job_fail(j, st, 0);
    }
    mdb_txn_abort(txn);
    atomic_fetch_sub(&j->active, 1);
}

/* Decodes the chunks of j's object that overlap [j->off, j->off + j->len) into j->dst: a chunk
 * inside the range straight there, one that sticks out into a buffer of its own first. */
static void read_work(spill_job *j, spill_part *p)
{
    struct ost_spill *sp = j->s->spill;
    MDB_txn *txn = read_txn(j);
    if (txn == NULL)
        return;
    uint8_t *part = NULL;
    uint64_t end = j->off + j->len;
    for (uint32_t i = (uint32_t)(j->off / CHUNK); (uint64_t)i * CHUNK < end; i++) {
        uint64_t at = (uint64_t)i * CHUNK;
        size_t clen = j->size - at < CHUNK ? (size_t)(j->size - at) : CHUNK;
        MDB_val v;
        if (!chunk_get(j, txn, i, &v))
            break;
        uint64_t from = at > j->off ? at : j->off, to = at + clen < end ? at + clen : end;
        bool whole = from == at && to == at + clen;
        if (!whole && part == NULL && (part = spw_malloc(SPW_MOD_OBJSTORE, CHUNK)) == NULL) {
            job_fail(j, SPW_ENOMEM, 0);
            break;
        }
        int st = ost_rec_decode(sp->lanes[p->lane].dctx, v.mv_data, v.mv_size,
                                whole ? j->dst + (at - j->off) : part, clen);
        if (st != 0) {
            job_fail(j, st, 0);
            break;
        }
        if (!whole)
            memcpy(j->dst + (from - j->off), part + (from - at), to - from);
    }
    spw_free(part);
    mdb_txn_abort(txn);
    atomic_fetch_sub(&j->active, 1);
}

static void delete_work(spill_job *j)
{
    struct ost_spill *sp = j->s->spill;
    MDB_txn *txn;
    int rc = mdb_txn_begin(sp->env, NULL, 0, &txn);
    for (uint32_t i = 0; rc == 0 && i < nchunks(j->size); i++) {
        uint8_t key[KEY_LEN];
        make_key(key, j->id, j->copy, i);
        MDB_val k = {KEY_LEN, key};
        int d = mdb_del(txn, sp->dbi, &k, NULL);
        if (d != 0 && d != MDB_NOTFOUND)
            rc = d;
    }
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    j->mdb_rc = rc;
    j->status = mdb_err(rc);
}

/* Closes the environment (its unlinked files go, and their blocks with them) and opens a fresh
 * one at the initial map size: LMDB reuses freed pages but never shrinks its file. This is also
 * how spilling comes back after a full disk left the environment unusable. The loop thread
 * touches the environment only between jobs. */
static void reset_work(spill_job *j)
{
    struct ost_spill *sp = j->s->spill;
    if (sp->env != NULL)
        mdb_env_close(sp->env);
    sp->env = NULL;
    j->mdb_rc = env_open(sp->dir, j->size, NULL, &sp->env, &sp->dbi);
    j->status = mdb_err(j->mdb_rc);
}

/* Bytes of disk the environment's data file takes (allocated blocks, not its length). */
static uint64_t env_disk_bytes(MDB_env *env)
{
    int fd;
    struct stat st;
    if (env == NULL || mdb_env_get_fd(env, &fd) != 0 || fstat(fd, &st) != 0)
        return 0;
    return (uint64_t)st.st_blocks * 512;
}

/* Copies the live records into a fresh environment and swaps it in: the old file's blocks go
 * back when it is closed. On failure (no room for the copy) the old environment stays. It waits
 * in the work queue like a spill (restores still go first) and runs alone once the lanes drain,
 * so the spills and deletions behind it wait for it; it copies only live bytes, at most half of
 * what is on disk (COMPACT_FACTOR). Accounting is untouched: the same records move. */
static void compact_work(spill_job *j)
{
    struct ost_spill *sp = j->s->spill;
    MDB_env *fresh;
    MDB_dbi dbi;
    j->stored = env_disk_bytes(sp->env);
    j->mdb_rc = env_open(sp->dir, sp->map_size, sp->env, &fresh, &dbi);
    j->status = mdb_err(j->mdb_rc);
    if (j->mdb_rc == 0) {
        mdb_env_close(sp->env);
        sp->env = fresh;
        sp->dbi = dbi;
    }
    j->size = env_disk_bytes(sp->env);
}

static void job_work_run(spill_job *j, spill_part *p);

/* Takes the first free lane, waiting for one while all are held (at most one part more than
 * lanes is queued, so the wait ends when a running part leaves its lane). */
static uint32_t lane_take(struct ost_spill *sp, spill_part *p, bool trace)
{
    uint64_t t0 = trace ? spw_now_ns() : 0;
    pthread_mutex_lock(&sp->lane_mu);
    uint32_t lane;
    for (;;) {
        for (lane = 0; lane < sp->nlanes && sp->lanes[lane].busy; lane++)
            ;
        if (lane < sp->nlanes)
            break;
        sp->lane_waiters++;
        pthread_cond_wait(&sp->lane_cv, &sp->lane_mu);
        sp->lane_waiters--;
    }
    spill_lane *ln = &sp->lanes[lane];
    ln->busy = true;
    if (++sp->lanes_held > sp->lanes_peak)
        sp->lanes_peak = sp->lanes_held;
    if (trace) {
        /* Idle with this part queued: from the later of its queueing and the lane's release. */
        uint64_t now = spw_now_ns();
        uint64_t from = p->t_queued > ln->tr_end ? p->t_queued : ln->tr_end;
        ln->tr_idle += now > from ? now - from : 0;
        ln->tr_wait += now - t0;
        ln->tr_parts++;
    }
    pthread_mutex_unlock(&sp->lane_mu);
    return lane;
}

/* Leaves the lane to a waiting part, if any. @return whether a part waits for it. */
static bool lane_give(struct ost_spill *sp, uint32_t lane, bool trace)
{
    pthread_mutex_lock(&sp->lane_mu);
    sp->lanes[lane].busy = false;
    sp->lanes_held--;
    if (trace)
        sp->lanes[lane].tr_end = spw_now_ns();
    bool waited = sp->lane_waiters > 0;
    if (waited)
        pthread_cond_signal(&sp->lane_cv);
    pthread_mutex_unlock(&sp->lane_mu);
    return waited;
}

static void job_work(uv_work_t *req)
{
    spill_part *p = req->data;
    spill_job *j = p->job;
    struct ost_spill *sp = j->s->spill;
    bool trace = sp->trace && j->kind == JOB_SPILL;
    p->lane = lane_take(sp, p, trace);
    spill_lane *ln = &sp->lanes[p->lane];
    uint64_t t0 = trace ? spw_now_ns() : 0;
    job_work_run(j, p);
    if (trace)
        ln->tr_busy += spw_now_ns() - t0;
    bool next = lane_give(sp, p->lane, trace);
    if (j->kind == JOB_SPILL && !next) {
        /* LMDB mallocs the transaction's dirty pages and frees them at commit; glibc keeps
         * such freed blocks in this thread's arena, where they would stay resident memory
         * beyond the store's capacity. Hand them back, off the event loop, once the lane has
         * no part waiting (during a run of spills the next one reuses them: no page faults). */
        uint64_t t1 = trace ? spw_now_ns() : 0;
        spw_heap_trim();
        if (trace) {
            /* The lane is given back: the part that takes it next may trim too. */
            uint64_t dt = spw_now_ns() - t1;
            pthread_mutex_lock(&sp->lane_mu);
            ln->tr_trim += dt;
            pthread_mutex_unlock(&sp->lane_mu);
        }
    }
}

static void job_work_run(spill_job *j, spill_part *p)
{
    if (j->kind != JOB_RESET && j->s->spill->env == NULL) {
        job_fail(j, SPW_EIO, 0); /* a reset could not open a new environment */
        atomic_fetch_sub(&j->active, 1);
        return;
    }
    switch (j->kind) {
    case JOB_SPILL:
        spill_work(j, p);
        break;
    case JOB_RESTORE:
        restore_work(j, p);
        break;
    case JOB_READ:
        read_work(j, p);
        break;
    case JOB_RESET:
        reset_work(j);
        break;
    case JOB_COMPACT:
        compact_work(j);
        break;
    default:
        delete_work(j);
    }
}

/* Calls every getter of o with status; on success each gets the object pinned. The pins are
 * all taken before the first call: a getter that lets go at once (its reader gone) would
 * otherwise leave o unpinned, and evicted or spilled, before the next one gets it. A getter may
 * also delete o (unpinned, or after a failed restore): o stays allocated until the calls
 * return (`calling`), for the caller reads it next and frees it if it was deleted. */
static void getters_call(ost_store *s, ost_obj *o, int status)
{
    ost_getter *g = o->getters;
    o->getters = NULL;
    bool was_calling = o->calling; /* a getter's own get may fail o's next restore at once */
    o->calling = true;
    if (status == 0) {
        uint32_t before = o->pins;
        for (ost_getter *x = g; x != NULL; x = x->next)
            o->pins++;
        ost__pins_changed(s, o, before);
    }
    while (g != NULL) {
        ost_getter *next = g->next;
        g->cb(g->arg, status, status == 0 ? o : NULL);
        spw_free(g);
        g = next;
    }
    o->calling = was_calling;
}

void ost__restore_fail(ost_store *s, ost_obj *o, int status)
{
    ost__obj_release_memory(s, o);
    o->restoring = false;
    getters_call(s, o, status);
    if (o->deleted && o->pins == 0)
        ost__obj_free_deleted(s, o);
}

static void spill_done(ost_store *s, spill_job *j)
{
    struct ost_spill *sp = s->spill;
    ost_obj *o = j->o;
    sp->spilling_bytes -= j->size;
    o->spilling = false;
    char hex[33];
    bool left = j->left_behind;
    if (left) {
        /* Records no object owns (spill_entries does not count them) fill the map: the reset
         * that follows the release of the last spilled copy, or at once if there is none, is
         * what drops them. */
        sp->written = true;
        j->left_behind = false;
    }
    /* Cancelled (its object deleted) after its last part had written the last chunk: a
     * complete copy, dropped below like any deleted object's. */
    if (j->status == SPW_ECANCELED && !j->took_back)
        j->status = 0;
    if (j->status == SPW_ECANCELED) {
        /* Its object was deleted while it was written: the parts stopped at their next chunk
         * and the last took back what was committed. Nothing failed. */
        if (o->pins == 0)
            ost__obj_free_deleted(s, o);
        spw_free(j);
        return;
    }
    if (j->status != 0) {
        if (j->status == SPW_ESPILLFULL && (sp->map_max == 0 || sp->map_size < sp->map_max) &&
            !sp->quiescing && o->deleted) {
            /* Nothing to try again for an object deleted meanwhile, but the map can grow: it
             * does (the next spills need the room too), and the storage is not full. */
            sp->grow_wanted = true;
            if (o->pins == 0)
                ost__obj_free_deleted(s, o);
            spw_free(j);
            return;
        }
        if (j->status == SPW_ESPILLFULL && (sp->map_max == 0 || sp->map_size < sp->map_max) &&
            !sp->quiescing) {
            /* Try again first, once the map has grown (lane_next, when no job runs). */
            sp->grow_wanted = true;
            o->spilling = true;
            sp->spilling_bytes += j->size;
            j->status = 0;
            j->stored = 0;
            j->mdb_rc = 0;
            j->next_chunk = 0;
            LL_PREPEND(sp->work, j);
            return;
        }
        if (j->status == SPW_ESPILLFULL)
            snprintf(sp->full_why, sizeof sp->full_why,
                     "spill map at --spill-map-max (%llu bytes) in %s",
                     (unsigned long long)sp->map_size, sp->dir);
        else
            snprintf(sp->full_why, sizeof sp->full_why, "%s in %s", spw_strerror(j->status),
                     sp->dir);
        if (!sp->full && !sp->retrying)
            spw_log(SPW_LOG_ERR,
                    "store=%s spill of obj=%s failed: %s%s%s (dir=%s); objects stay in memory "
                    "until space is freed (tried again every %u ms)",
                    s->name, spw_id_hex(o->id, hex), spw_strerror(j->status), j->mdb_rc ? ": " : "",
                    j->mdb_rc ? mdb_strerror(j->mdb_rc) : "", sp->dir, s->opts.spill_retry_ms);
        sp->full = true;
        sp->retrying = false;
        sp->full_ns = spw_now_ns();
        /* Its reset drops the records and keeps this failure (its reason, and its retry after
         * spill_retry_ms): clearing it would spill the same object again at once, and fail. */
        sp->reset_keeps_full |= left;
        ost__lru_update(s, o);
        if (o->deleted && o->pins == 0)
            ost__obj_free_deleted(s, o);
        spw_free(j);
        return;
    }
    if (sp->retrying) {
        spw_log(SPW_LOG_NOTICE, "store=%s spilling again in %s: %s is past", s->name, sp->dir,
                sp->full_why);
        sp->retrying = false;
    }
    o->on_disk = true;
    o->stored_size = j->stored;
    sp->written = true;
    s->st.objs_disk++;
    s->st.spilled_raw += o->size;
    s->st.spilled_stored += j->stored;
    s->st.spill_count++;
    s->st.spill_bytes += o->size;
    s->st.spill_entries += nchunks(o->size);
    if (o->deleted) {
        if (o->pins == 0)
            ost__obj_free_deleted(s, o);
    } else if (o->pins == 0 && o->blk != NULL) {
        /* Written: its memory can go. A reader that pinned it meanwhile keeps it. */
        ost__obj_release_memory(s, o);
    } else {
        ost__lru_update(s, o);
    }
    spw_free(j);
}

static void restore_done(ost_store *s, spill_job *j)
{
    ost_obj *o = j->o;
    if (j->status != 0) {
        char hex[33];
        spw_log(SPW_LOG_ERR, "store=%s restore of obj=%s failed: %s%s%s", s->name,
                spw_id_hex(o->id, hex), spw_strerror(j->status), j->mdb_rc ? ": " : "",
                j->mdb_rc ? mdb_strerror(j->mdb_rc) : "");
        ost__restore_fail(s, o, j->status);
    } else {
        s->st.restore_count++;
        s->st.restore_bytes += o->size;
        o->restoring = false;
        o->last_use_ns = spw_now_ns();
        getters_call(s, o, o->deleted ? SPW_ENOOBJ : 0);
        if (o->deleted && o->pins == 0)
            ost__obj_free_deleted(s, o);
        else
            ost__lru_update(s, o);
    }
    spw_free(j);
}

static void read_done(ost_store *s, spill_job *j)
{
    ost_obj *o = j->o;
    if (j->status != 0 && j->status != SPW_ESHUTDOWN) {
        char hex[33];
        spw_log(SPW_LOG_ERR, "store=%s read of spilled obj=%s failed: %s%s%s", s->name,
                spw_id_hex(o->id, hex), spw_strerror(j->status), j->mdb_rc ? ": " : "",
                j->mdb_rc ? mdb_strerror(j->mdb_rc) : "");
    } else if (j->status == 0) {
        s->st.disk_read_bytes += j->len;
    }
    o->disk_reads--;
    j->cb(j->cb_arg, j->status, NULL);
    if (o->deleted && o->pins == 0)
        ost__obj_free_deleted(s, o);
    spw_free(j);
}

static void job_after(uv_work_t *req, int status)
{
    (void)status;
    spill_part *p = req->data;
    spill_job *j = p->job;
    ost_store *s = j->s;
    struct ost_spill *sp = s->spill;
    spw_free(p);
    sp->nrunning--;
    s->busy--;
    /* spill_ns and restore_ns count wall time with at least one such job running, not the sum
     * over lanes, so bytes/ns is the store's rate. */
    uint64_t now = spw_now_ns();
    if (j->kind == JOB_SPILL && --sp->nspills == 0)
        s->st.spill_ns += now - sp->spill_t0;
    if (j->kind == JOB_RESTORE && --sp->nrestores == 0)
        s->st.restore_ns += now - sp->restore_t0;
    if (--j->nparts > 0) {
        lane_next(s); /* other parts of the job still run */
        return;
    }
    LL_DELETE(sp->running, j);
    if (j->kind == JOB_RESET || j->kind == JOB_COMPACT)
        sp->exclusive = false;
    switch (j->kind) {
    case JOB_SPILL:
        spill_done(s, j);
        break;
    case JOB_RESTORE:
        restore_done(s, j);
        break;
    case JOB_READ:
        read_done(s, j);
        break;
    case JOB_RESET:
        sp->resetting = false;
        if (j->status != 0) {
            spw_log(SPW_LOG_ERR, "store=%s cannot reopen the spill environment in %s: %s; "
                                 "spilling is off",
                    s->name, sp->dir, mdb_strerror(j->mdb_rc));
            snprintf(sp->full_why, sizeof sp->full_why, "cannot reopen the spill environment "
                                                         "in %s", sp->dir);
            sp->full = true;
            sp->full_ns = 0; /* not tried again: there is no environment to spill into */
            sp->written = false; /* no retry loop; the next start of the worker tries again */
        } else {
            spw_log(SPW_LOG_INFO, "store=%s spill environment emptied: disk handed back in %s",
                    s->name, sp->dir);
            sp->map_size = j->size;
            sp->compact_floor = 0;
            /* A spill failure that left records stays until its retry (full_ns 0: no retry). */
            sp->full = sp->full && sp->reset_keeps_full && sp->full_ns != 0;
            sp->written = false;
        }
        sp->reset_keeps_full = false;
        spw_free(j);
        break;
    case JOB_COMPACT:
        sp->compacting = false;
        sp->compact_floor = j->size;
        if (j->status != 0) {
            spw_log(SPW_LOG_WARN, "store=%s cannot compact the spill environment in %s: %s",
                    s->name, sp->dir, mdb_strerror(j->mdb_rc));
        } else {
            spw_log(SPW_LOG_INFO,
                    "store=%s spill environment compacted: %llu -> %llu bytes on disk in %s "
                    "(%llu live)",
                    s->name, (unsigned long long)j->stored, (unsigned long long)j->size,
                    sp->dir, (unsigned long long)s->st.spilled_stored);
            sp->full = false;
        }
        spw_free(j);
        break;
    default:
        sp->deleted = true;
        sp->deleted_ns = spw_now_ns();
        if (j->status != 0)
            spw_log(SPW_LOG_WARN, "store=%s deleting a spilled copy failed: %s", s->name,
                    j->mdb_rc ? mdb_strerror(j->mdb_rc) : spw_strerror(j->status));
        else
            sp->full = false; /* space came back */
        spw_free(j);
    }
    lane_next(s);
    if (s->busy == 0 && sp->nrunning == 0 && sp->quiescing && sp->idle_cb != NULL)
        sp->idle_cb(sp->idle_arg);
    else if (!sp->quiescing) {
        ost__waiters_retry(s);
        ost__spill_maintain(s);
        if (s->opts.freed_cb != NULL)
            s->opts.freed_cb(s->opts.freed_arg);
    }
}

/* Between jobs, with none running (mdb_env_set_mapsize wants no open transaction): grows the
 * map a spill found full (spill_done queued that spill again, unless its object is gone). */
static void grow_map(ost_store *s)
{
    struct ost_spill *sp = s->spill;
    sp->grow_wanted = false;
    uint64_t grown = sp->map_size * 2;
    if (sp->map_max != 0 && grown > sp->map_max)
        grown = sp->map_max;
    /* mdb_env_set_mapsize unmaps the environment before it maps it at the new size, and when
     * that mmap fails it leaves the environment with no map at all: the next transaction
     * faults. So ask the kernel first, for an address range of the new size (held alongside
     * the old map, so a stricter test than LMDB's own). */
    void *probe = mmap(NULL, (size_t)grown, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    int rc = probe == MAP_FAILED ? errno : 0;
    if (probe != MAP_FAILED)
        munmap(probe, (size_t)grown);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "store=%s cannot grow the spill map to %llu bytes: %s", s->name,
                (unsigned long long)grown, strerror(rc));
        sp->map_max = sp->map_size; /* the retried spill fails for good */
        return;
    }
    rc = mdb_env_set_mapsize(sp->env, grown);
    if (rc == 0) {
        spw_log(SPW_LOG_INFO, "store=%s spill map grown to %llu bytes", s->name,
                (unsigned long long)grown);
        sp->map_size = grown;
        return;
    }
    /* Lost the map after all (the address space filled in between): the environment is
     * unusable. Jobs fail without it (SPW_EIO) as after a failed reset, and the reset that
     * follows the release of the last spilled copy opens a fresh one. */
    spw_log(SPW_LOG_ERR, "store=%s cannot grow the spill map: %s; spilling is off until the "
                         "spilled copies are released", s->name, mdb_strerror(rc));
    mdb_env_close(sp->env);
    sp->env = NULL;
    sp->map_max = sp->map_size;
    snprintf(sp->full_why, sizeof sp->full_why, "cannot map the spill environment in %s",
             sp->dir);
    sp->full = true;
    sp->full_ns = 0;
    sp->written = true; /* with nothing on disk, the reset runs at once */
}

/* Queues a reset first (nothing left on disk; only with no job running, or a running spill
 * could add a record the reset would drop), or a compaction (most of the file is freed pages;
 * the lanes then drain before it runs). */
static void maybe_hand_back(ost_store *s)
{
    struct ost_spill *sp = s->spill;
    if (sp->nrunning == 0 && sp->restores == NULL && sp->work == NULL && sp->written &&
        !sp->resetting && s->st.spill_entries == 0 && s->st.objs_disk == 0 && !s->closing) {
        /* Nothing on disk any more: give the file's blocks back. */
        spill_job *r = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *r);
        r->s = s;
        r->kind = JOB_RESET;
        r->size = s->opts.spill_map_size != 0 ? s->opts.spill_map_size : 4 * s->capacity;
        if (sp->map_max != 0 && r->size > sp->map_max)
            r->size = sp->map_max;
        sp->resetting = true;
        sp->work = r;
    } else if (sp->deleted && sp->deletes_queued == 0 && !sp->resetting && !sp->compacting &&
               s->st.spill_entries > 0 && !s->closing &&
               spw_now_ns() - sp->deleted_ns >= (uint64_t)s->opts.compact_quiet_ms * 1000000ULL) {
        /* Live copies remain, none went for compact_quiet_ms (ost__spill_maintain looks again
         * until then), and most of the file may be freed pages: compact. */
        sp->deleted = false;
        uint64_t disk = env_disk_bytes(sp->env);
        if (disk > COMPACT_FACTOR * s->st.spilled_stored + COMPACT_SLACK &&
            disk > sp->compact_floor + COMPACT_SLACK) {
            spill_job *c = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *c);
            c->s = s;
            c->kind = JOB_COMPACT;
            sp->compacting = true; /* one at a time: until it runs, the file stays as large */
            LL_PREPEND(sp->work, c);
        }
    }
}

/* The first job of q that may start now: none for the same object runs. */
static spill_job *startable(struct ost_spill *sp, spill_job *q)
{
    for (spill_job *j = q; j != NULL; j = j->next) {
        if (j->kind == JOB_RESET || j->kind == JOB_COMPACT)
            return j;
        spill_job *r;
        bool busy = false;
        LL_FOREACH(sp->running, r)
        {
            if (r->kind != JOB_RESET && r->kind != JOB_COMPACT && spw_id_eq(r->id, j->id))
                busy = true;
        }
        if (!busy)
            return j;
    }
    return NULL;
}

/* The oldest running spill or restore (of `kind`) with chunks no part has claimed, after
 * counting one more part in (only while some part still works: once `active` is 0 the last
 * part may be taking back a failed spill). NULL when there is none. */
static spill_job *joinable(struct ost_spill *sp, int kind)
{
    spill_job *found = NULL;
    for (spill_job *j = sp->running; j != NULL; j = j->next) {
        if (j->kind == kind && j->status == 0 && j->next_chunk < nchunks(j->size))
            found = j;
    }
    if (found == NULL)
        return NULL;
    uint32_t a = found->active;
    while (a > 0 && !atomic_compare_exchange_weak(&found->active, &a, a + 1))
        ;
    return a > 0 ? found : NULL;
}

/* Runs one more part of j on a free lane. */
static void part_start(ost_store *s, spill_job *j)
{
    struct ost_spill *sp = s->spill;
    spill_part *p = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *p);
    p->job = j;
    p->lane = UINT32_MAX;
    p->first = j->kind == JOB_SPILL || j->kind == JOB_RESTORE
                   ? atomic_fetch_add(&j->next_chunk, 1)
                   : UINT32_MAX;
    p->req.data = p;
    if (sp->trace)
        p->t_queued = spw_now_ns();
    j->nparts++;
    sp->nrunning++;
    s->busy++;
    if (j->kind == JOB_SPILL && sp->nspills++ == 0)
        sp->spill_t0 = spw_now_ns();
    if (j->kind == JOB_RESTORE && sp->nrestores++ == 0)
        sp->restore_t0 = spw_now_ns();
    uv_queue_work(s->loop, &p->req, job_work, job_after);
}

/* Starts parts on free lanes: more of a running restore, a queued restore, more of a running
 * spill, queued work, in that order. */
static void lane_next(ost_store *s)
{
    struct ost_spill *sp = s->spill;
    /* One part more than lanes: it waits in lane_take for the first lane a part leaves. */
    while (!sp->quiescing && !sp->exclusive && sp->nrunning < sp->nlanes + 1) {
        if (sp->nrunning == 0 && sp->grow_wanted)
            grow_map(s);
        else if (sp->grow_wanted)
            return; /* drain first */
        maybe_hand_back(s);
        spill_job *j = joinable(sp, JOB_RESTORE);
        if (j != NULL) {
            part_start(s, j);
            continue;
        }
        spill_job **q = &sp->restores;
        j = startable(sp, *q);
        if (j == NULL && (j = joinable(sp, JOB_SPILL)) != NULL) {
            part_start(s, j);
            continue;
        }
        if (j == NULL) {
            q = &sp->work;
            j = startable(sp, *q);
        }
        if (j == NULL)
            return;
        if (j->kind == JOB_RESET || j->kind == JOB_COMPACT) {
            if (sp->nrunning > 0)
                return; /* drain first */
            sp->exclusive = true;
        }
        LL_DELETE(*q, j);
        if (j->kind == JOB_DELETE)
            sp->deletes_queued--;
        LL_PREPEND(sp->running, j);
        j->active = 1;
        part_start(s, j);
    }
}

static void enqueue(ost_store *s, spill_job *j)
{
    struct ost_spill *sp = s->spill;
    spill_job **q = j->kind == JOB_RESTORE || j->kind == JOB_READ ? &sp->restores : &sp->work;
    LL_APPEND(*q, j);
    lane_next(s);
}

/* ------------------------------------------------------------ the policy */

void ost_store_hold_spills(ost_store *s, bool hold)
{
    if (hold) {
        s->spill_holds++;
        return;
    }
    SPW_ASSERT(s->spill_holds > 0);
    if (--s->spill_holds == 0)
        ost__spill_maintain(s);
}

/* The spill job of o in `list`, or NULL. */
static spill_job *spill_job_of(spill_job *list, const ost_obj *o)
{
    spill_job *j;
    LL_FOREACH(list, j)
    {
        if (j->kind == JOB_SPILL && j->o == o)
            break;
    }
    return j;
}

bool ost__spill_cancel(ost_store *s, ost_obj *o)
{
    struct ost_spill *sp = s->spill;
    if (sp == NULL || !o->spilling)
        return false;
    spill_job *j = spill_job_of(sp->work, o);
    if (j == NULL) {
        /* Running: its parts stop at their next chunk (claim_chunk) and the last takes back
         * what was committed, so the memory goes after at most one chunk per lane, not after
         * the whole object is written for nobody. */
        if ((j = spill_job_of(sp->running, o)) != NULL)
            job_fail(j, SPW_ECANCELED, 0);
        return false;
    }
    LL_DELETE(sp->work, j);
    sp->spilling_bytes -= j->size;
    o->spilling = false;
    spw_free(j);
    return true;
}

void ost__spill_forget(ost_store *s, ost_obj *o)
{
    if (!o->on_disk)
        return;
    o->on_disk = false;
    s->st.objs_disk--;
    s->st.spilled_raw -= o->size;
    s->st.spilled_stored -= o->stored_size;
    s->st.spill_entries -= nchunks(o->size);
    if (s->spill == NULL || s->spill->quiescing || s->closing)
        return; /* the environment goes with the process */
    spill_job *j = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *j);
    j->s = s;
    j->kind = JOB_DELETE;
    j->id = o->id;
    j->copy = o->copy;
    j->size = o->size;
    s->spill->deletes_queued++;
    enqueue(s, j);
}

/* Makes o, an object on the LRU list, leave memory: freed at once when its spilled copy is
 * valid (*evicted set), else a spill is queued. Returns false when neither can be done (the
 * spill storage is full and o has no copy there). */
static bool spill_one(ost_store *s, ost_obj *o, bool *evicted)
{
    struct ost_spill *sp = s->spill;
    if (o->on_disk) {
        /* Already on disk and unchanged (objects are immutable): free, no write. */
        ost__obj_release_memory(s, o);
        ost__lru_update(s, o);
        s->st.evictions++;
        *evicted = true;
        return true;
    }
    if (sp->full)
        return false;
    o->spilling = true;
    ost__lru_update(s, o);
    sp->spilling_bytes += o->size;
    spill_job *j = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *j);
    j->s = s;
    j->kind = JOB_SPILL;
    j->o = o;
    j->id = o->id;
    j->copy = o->copy = ++sp->copies;
    j->size = o->size;
    j->src = ost_obj_data(o);
    enqueue(s, j);
    return true;
}

/* Frees memory of objects whose spilled copy is valid, and queues spills of others, oldest
 * use first, until `need` bytes are on their way out; spared objects only with `spared_too`.
 * Returns what is still needed. */
static uint64_t spill_some(ost_store *s, uint64_t need, bool spared_too)
{
    ost_obj *o = s->lru, *next;
    bool evicted = false;
    uint64_t now = spared_too ? 0 : spw_now_ns();
    while (o != NULL && need > 0) {
        next = o->lru_next;
        uint64_t bsize = o->size + (s->granule - o->size % s->granule) % s->granule;
        if ((spared_too || o->spare_until <= now) && spill_one(s, o, &evicted))
            need = need > bsize ? need - bsize : 0;
        o = next;
    }
    if (evicted)
        ost__room_freed(s);
    return need;
}

/* The arena's blocks in address order, each with what emptying it costs (window_room). */
typedef struct window_block {
    uint64_t size;
    uint64_t cost; /* WINDOW_NEVER: it cannot be emptied now */
    ost_obj *o;    /* NULL for a free block */
} window_block;

typedef struct window_walk {
    window_block *b;
    size_t n, cap;
    uint64_t now, oldest; /* the least recently used object's last use */
} window_walk;

#define WINDOW_NEVER UINT64_MAX

static void window_add(void *arg, uint64_t size, bool is_free, void *owner)
{
    window_walk *w = arg;
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->b = spw_realloc(SPW_MOD_OBJSTORE, w->b, w->cap * sizeof *w->b);
    }
    ost_obj *o = is_free ? NULL : owner;
    uint64_t cost = 0;
    if (!is_free && (o == NULL || !o->on_lru)) {
        /* Unknown, or pinned, being written, restored or deleted while in use; one already
         * being spilled costs nothing more (its memory comes back when it is written). */
        cost = o != NULL && o->spilling ? 0 : WINDOW_NEVER;
    } else if (o != NULL) {
        /* A write for one with no valid copy on disk; an eviction is cheaper, but it may have
         * to be read back. Up to twice that for the most recently used (LRU's bet: used again
         * sooner than the older ones), and once more for one spared for a task about to read
         * it. */
        uint64_t base = o->on_disk ? size / 4 : size;
        uint64_t since = o->last_use_ns > w->oldest ? o->last_use_ns - w->oldest : 0;
        double recent = (double)since / (double)(w->now - w->oldest + 1);
        cost = base + (uint64_t)((double)base * recent);
        if (o->spare_until > w->now)
            cost += size;
    }
    w->b[w->n++] = (window_block){size, cost, cost == 0 ? NULL : o};
}

/* Room for an allocation of `size` bytes that no free block can take although the store may
 * hold that much free in pieces: spilling in LRU order frees bytes scattered over the arena,
 * which may take most of the store before two holes meet. This finds the contiguous range of
 * at least `size` bytes that is cheapest to empty (bytes to write, evictions, spared objects;
 * none pinned or being written) and makes its objects leave. Returns false when no such range
 * exists (every one holds an object that cannot leave now), nothing done. A range already
 * being emptied costs nothing, so the next call finds it again and queues nothing more.
 * *evicted: memory was freed at once (the caller tells the waiters, after its own use of them). */
static bool window_room(ost_store *s, uint64_t size, bool *evicted)
{
    window_walk w = {.now = spw_now_ns()};
    w.oldest = s->lru != NULL && s->lru->last_use_ns < w.now ? s->lru->last_use_ns : w.now;
    ost_alloc_foreach_block(s->alloc, window_add, &w);
    uint64_t best = WINDOW_NEVER, len = 0, cost = 0;
    size_t bi = 0, bj = 0, i = 0;
    for (size_t j = 0; j < w.n; j++) {
        if (w.b[j].cost == WINDOW_NEVER) {
            i = j + 1;
            len = cost = 0;
            continue;
        }
        len += w.b[j].size;
        cost += w.b[j].cost;
        for (; i < j && len - w.b[i].size >= size; i++) {
            len -= w.b[i].size;
            cost -= w.b[i].cost;
        }
        if (len >= size && cost < best) {
            best = cost;
            bi = i;
            bj = j;
        }
    }
    bool found = best != WINDOW_NEVER;
    for (size_t k = bi; found && k <= bj; k++)
        if (w.b[k].o != NULL)
            (void)spill_one(s, w.b[k].o, evicted);
    spw_free(w.b);
    return found;
}

void ost__spill_maintain(ost_store *s)
{
    struct ost_spill *sp = s->spill;
    if (sp == NULL || sp->quiescing || s->closing || s->spill_holds > 0)
        return;
    uint64_t to_free;
    enum ost_level level = ost_mem_state(s, &to_free);
    if (sp->full && sp->full_ns != 0 && sp->nrunning == 0 &&
        spw_now_ns() - sp->full_ns >= (uint64_t)s->opts.spill_retry_ms * 1000000ULL) {
        /* A spill failed (disk or map full) a while ago: try again, for space may have come
         * back or the object that did not fit may be gone. Nothing frees space in a store with
         * nothing on disk, so `full` would otherwise stay until the worker restarts. */
        sp->full = false;
        sp->retrying = true;
    }
    /* Hysteresis: an episode starts above the threshold and runs down to the target. */
    if (level != OST_LEVEL_OK)
        sp->active = true;
    else if (to_free == 0)
        sp->active = false;
    if (!sp->active)
        to_free = 0;
    /* The first waiter is served first; when it waits only because the free bytes lie in
     * pieces, a range emptied for it does better than LRU order (window_room). With nothing on
     * the LRU list no object could leave for it: the walk is not made (maintenance runs on
     * every free while a waiter is held back by pins). */
    uint64_t waiting = s->waiting_bytes;
    const ost_waiter *head = s->waiters;
    bool evicted = false;
    if (head != NULL && s->lru != NULL && !sp->full && !sp->retrying &&
        !ost_alloc_fits(s->alloc, head->size) && window_room(s, head->size, &evicted))
        waiting -= head->size;
    uint64_t need = to_free + waiting;
    need = need > sp->spilling_bytes ? need - sp->spilling_bytes : 0;
    if (sp->retrying && need > 0) /* one object at a time until a spill succeeds again */
        need = sp->spilling_bytes > 0 ? 0 : 1;
    if (need > 0)
        need = spill_some(s, need, false);
    /* Spared objects go only for room an allocation waits for, not for headroom. */
    if (need > 0 && waiting > 0)
        spill_some(s, need < waiting ? need : waiting, true);
    if (evicted)
        ost__room_freed(s);
    if (sp->deleted)
        lane_next(s); /* a compaction the quiet wait held back */
}

/* A job of `kind` reading o's spilled copy (a restore or a read). */
static spill_job *copy_job(ost_store *s, int kind, ost_obj *o)
{
    spill_job *j = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *j);
    j->s = s;
    j->kind = kind;
    j->o = o;
    j->id = o->id;
    j->copy = o->copy;
    j->size = o->size;
    return j;
}

int ost_obj_read_spilled(ost_store *s, ost_obj *o, uint64_t off, uint64_t len, uint8_t *dst,
                         ost_cb cb, void *arg)
{
    if (o->state != OST_SEALED)
        return SPW_ENOTSEALED;
    if (off > o->size || len > o->size - off || len == 0)
        return SPW_EINVAL;
    if (!o->on_disk)
        return SPW_EAGAIN;
    if (s->spill == NULL || s->spill->quiescing)
        return SPW_ESHUTDOWN;
    spill_job *j = copy_job(s, JOB_READ, o);
    j->dst = dst;
    j->off = off;
    j->len = len;
    j->cb = cb;
    j->cb_arg = arg;
    o->disk_reads++;
    enqueue(s, j);
    return 0;
}

void ost_obj_hold_spilled(ost_store *s, ost_obj *o)
{
    (void)s;
    o->disk_reads++;
}

void ost_obj_release_spilled(ost_store *s, ost_obj *o)
{
    SPW_ASSERT(o->disk_reads > 0);
    o->disk_reads--;
    if (o->deleted && o->pins == 0)
        ost__obj_free_deleted(s, o);
}

void ost__restore_start(ost_store *s, ost_obj *o)
{
    if (s->spill->quiescing) {
        /* No job starts any more: a restore that got its memory only now (a waiter, after
         * something was freed) would wait in the queue for ever. */
        ost__restore_fail(s, o, SPW_ESHUTDOWN);
        return;
    }
    spill_job *j = copy_job(s, JOB_RESTORE, o);
    j->dst = s->base + ost_obj_offset(o);
    enqueue(s, j);
}

int ost_obj_get_async(ost_store *s, ost_obj *o, ost_cb cb, void *arg)
{
    if (o->state != OST_SEALED) {
        cb(arg, SPW_ENOTSEALED, NULL);
        return 0;
    }
    if (o->blk != NULL && !o->restoring) {
        int rc = ost_obj_pin(s, o);
        cb(arg, rc, rc == 0 ? o : NULL);
        return 0;
    }
    if (!o->on_disk || s->spill == NULL || s->spill->quiescing) {
        cb(arg, s->spill != NULL && s->spill->quiescing ? SPW_ESHUTDOWN : SPW_EOBJLOST, NULL);
        return 0;
    }
    ost_getter *g = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *g);
    g->cb = cb;
    g->arg = arg;
    g->next = o->getters;
    o->getters = g;
    if (o->restoring)
        return 0; /* joins the restore under way */
    o->restoring = true;
    bool passes;
    int rc = ost__goes_ahead(s, o->size, &passes) ? ost__obj_alloc(s, o) : SPW_ENOMEM;
    if (rc == 0 && passes)
        ost__passed(s, o->size);
    if (rc == 0) {
        ost__restore_start(s, o);
        return 0;
    }
    /* No room: wait like an allocation, making room by spilling others. */
    ost_waiter *w = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *w);
    w->id = o->id;
    w->size = o->size;
    w->restore = o;
    w->deadline_ns = spw_now_ns() + (uint64_t)s->opts.alloc_wait_ms * 1000000ULL;
    DL_APPEND(s->waiters, w);
    s->waiting_bytes += o->size;
    ost__spill_maintain(s);
    return 0;
}

/* ------------------------------------------------------------ test hooks */

int ost_store_spill_all(ost_store *s)
{
    if (s->spill == NULL)
        return SPW_ENOTSUP;
    spill_some(s, UINT64_MAX, true);
    return 0;
}

void ost_store_quiesce(ost_store *s, void (*idle)(void *arg), void *arg)
{
    struct ost_spill *sp = s->spill;
    if (sp == NULL) {
        if (idle != NULL)
            idle(arg);
        return;
    }
    sp->quiescing = true;
    sp->idle_cb = idle;
    sp->idle_arg = arg;
    /* Queued work is dropped: spills leave objects in memory, restores fail. */
    spill_job *j, *tmp;
    LL_FOREACH_SAFE(sp->work, j, tmp)
    {
        if (j->kind == JOB_SPILL) {
            j->o->spilling = false;
            sp->spilling_bytes -= j->size;
            ost__lru_update(s, j->o);
        }
        spw_free(j);
    }
    sp->work = NULL;
    sp->deletes_queued = 0;
    sp->compacting = false;
    LL_FOREACH_SAFE(sp->restores, j, tmp)
    {
        if (j->kind == JOB_READ) {
            j->status = SPW_ESHUTDOWN;
            read_done(s, j);
            continue;
        }
        ost_obj *o = j->o;
        spw_free(j);
        ost__restore_fail(s, o, SPW_ESHUTDOWN);
    }
    sp->restores = NULL;
    if (sp->nrunning == 0 && idle != NULL)
        idle(arg);
}
