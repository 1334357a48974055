/*
 * Graph progress: each submitted graph's tasks by state, its bytes in flight against its cap,
 * who submitted it from where, and when it finished. GRAPHS replies serve spillway-ctl jobs,
 * spillway_graph_status and the dashboard.
 *
 * Owns: every sched_graph, on s->graphs (oldest first). A graph record lives while one of its
 * task records does (or while it is being submitted), and then stays listed as finished until
 * SCHED_GRAPHS_KEPT newer finished graphs push it out, so a job that just ended still shows at
 * 100 %. Invariants: g->counts[k] is the number of g's tasks whose last state is k (freed
 * tasks keep theirs); s->graphs_gone counts the listed graphs with ntasks == 0.
 */
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

/* After a graph this large is gone, the heap's free pages go back to the kernel: glibc would
 * otherwise keep the pages of the freed task records, resident and unused. */
#define GRAPH_TRIM_TASKS 10000

sched_graph *sched__graph_new(sched *s, sched_session *ss, uint64_t gid)
{
    sched_graph *g = spw_calloc(SPW_MOD_SCHED, 1, sizeof *g);
    g->session = ss->id;
    g->gid = gid;
    g->no = ++s->graph_seq;
    g->created_ms = spw_wall_ms();
    g->pid = ss->pid;
    memcpy(g->host, ss->host, sizeof g->host);
    g->ntasks = 1; /* held while the graph is being submitted */
    DL_APPEND2(s->graphs, g, gprev, gnext);
    return g;
}

static void graph_free(sched *s, sched_graph *g)
{
    DL_DELETE2(s->graphs, g, gprev, gnext);
    sched__spread_free(g);
    spw_free(g->plugins);
    spw_free(g->site);
    spw_free(g);
}

static uint64_t unfinished(const sched_graph *g)
{
    return g->counts[PROTO_TSTATE_WAITING] + g->counts[PROTO_TSTATE_READY] +
           g->counts[PROTO_TSTATE_ASSIGNED] + g->counts[PROTO_TSTATE_RUNNING];
}

static void maybe_ended(sched_graph *g)
{
    if (!g->submitted)
        return;
    if (unfinished(g) == 0) {
        if (g->ended_ms == 0)
            g->ended_ms = spw_wall_ms();
    } else {
        g->ended_ms = 0; /* a task runs again (lineage): not finished after all */
    }
}

void sched__graph_count(sched_graph *g, int from, int to)
{
    if (from >= 0 && g->counts[from] > 0)
        g->counts[from]--;
    g->counts[to]++;
    maybe_ended(g);
}

void sched__graph_submitted(sched *s, sched_graph *g, const char *site, size_t sitelen)
{
    (void)s;
    g->submitted = true;
    if (site != NULL && sitelen > 0 && g->site == NULL)
        g->site = spw_strndup(SPW_MOD_SCHED, site, sitelen);
    maybe_ended(g);
}

void sched__graph_release(sched *s, sched_graph *g)
{
    if (g == NULL || --g->ntasks > 0)
        return;
    sched__plugins_graph_done(s, g);
    sched__jnl_graph_gone(s, g);
    if (g->ended_ms == 0)
        g->ended_ms = spw_wall_ms();
    s->graphs_gone++;
    if (g->total >= GRAPH_TRIM_TASKS)
        spw_heap_trim();
    /* Push out the oldest records that nothing refers to any more. */
    sched_graph *x = s->graphs, *next;
    while (s->graphs_gone > SCHED_GRAPHS_KEPT && x != NULL) {
        next = x->gnext;
        if (x->ntasks == 0) {
            graph_free(s, x);
            s->graphs_gone--;
        }
        x = next;
    }
}

/* The graphs a GRAPHS_REQ asks for (session and graph, 0 = any); next is the cursor. */
typedef struct graph_sel {
    uint64_t sess, gid, now;
    const sched_graph *next;
} graph_sel;

static bool selected(const graph_sel *q, const sched_graph *g)
{
    return (q->sess == 0 || g->session == q->sess) && (q->gid == 0 || g->gid == q->gid);
}

static void put_graph(proto_enc *e, uint32_t i, void *arg)
{
    graph_sel *q = arg;
    while (!selected(q, q->next))
        q->next = q->next->gnext;
    const sched_graph *g = q->next;
    q->next = g->gnext;
    uint64_t now = q->now;
    proto_put_graph_rec(e,
                        &(proto_graph_rec){.session = g->session,
                                           .id = g->gid,
                                           .no = g->no,
                                           .host = g->host,
                                           .pid = g->pid,
                                           .site = g->site,
                                           .age_ms = now > g->created_ms ? now - g->created_ms : 0,
                                           .counts = {g->counts, PROTO_TSTATE_COUNT},
                                           .live = g->live_bytes,
                                           .max_bytes = g->max_bytes,
                                           .ended_ms = g->ended_ms == 0 ? 0
                                                       : g->ended_ms > g->created_ms
                                                           ? g->ended_ms - g->created_ms
                                                           : 1});
}

void sched__graphs_req(sched *s, sched_session *ss, const proto_msg *m)
{
    graph_sel q = {m->f[F_GREQ_SESSION].u, m->f[F_GREQ_GRAPH].u, spw_wall_ms(), s->graphs};
    uint32_t n = 0;
    for (const sched_graph *g = s->graphs; g != NULL; g = g->gnext)
        n += selected(&q, g);
    int rc = proto_send_graphs(
        ss->conn, m->req, &(proto_graphs_msg){.graphs = {.n = n, .put = put_graph, .arg = &q}});
    if (rc != 0)
        proto_conn_error(ss->conn, m->req, rc, "graph list does not fit in a frame");
}

void sched__graphs_free_all(sched *s)
{
    while (s->graphs != NULL)
        graph_free(s, s->graphs);
    s->graphs_gone = 0;
}
