/*
 * Unit tests of spw_docs (client/docs): the documents keep every key when a peer's string is not
 * UTF-8. The replies are built by hand, as no decoder passes such a string: a worker name, a
 * client host, a call site, an owner host, a task name, a holder and a node name, each with
 * bytes that are not well-formed UTF-8, must come out with '?' in their place, never as a
 * missing key (jansson's json_string returns NULL for them, and a NULL member is dropped).
 */
#include "test_main.h"

#include <stdio.h>
#include <string.h>

#include "spillway/docs.h"

static void sv(proto_val *v, const char *s)
{
    v->bin.ptr = (const uint8_t *)s;
    v->bin.len = (uint32_t)strlen(s);
}

static void recs(proto_val *v, proto_val *r, uint32_t n, uint32_t nf)
{
    v->arr.v = r;
    v->arr.n = n;
    v->arr.nf = nf;
}

/* The string member k of o; fails the test if it is absent or not a string. */
static const char *member(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v))
        fail_msg("member '%s' is missing or not a string", k);
    return json_string_value(v);
}

static void doc_str_scrubs_and_keeps_valid_text(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"w\xc3\xb6rker", "w\xc3\xb6rker"}, /* valid UTF-8 is kept as it is */
        {"w\xffrker", "w?rker"},
        {"a\xc0\xaf" "b", "a??b"},          /* an overlong '/' */
        {"tail\xe2\x82", "tail??"},        /* a sequence cut short */
        {"\xed\xa0\x80", "???"},           /* a surrogate */
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = ctl_doc_str(cases[i].in);
        assert_non_null(j);
        assert_string_equal(json_string_value(j), cases[i].out);
        json_decref(j);
    }
    json_t *j = ctl_doc_str(NULL);
    assert_string_equal(json_string_value(j), "");
    json_decref(j);
}

static void doc_status_keeps_names_that_are_not_utf8(void **state)
{
    (void)state;
    proto_val w[PROTO_NF_REC_SWORKER] = {0}, c[PROTO_NF_REC_SCLIENT] = {0};
    sv(&w[R_SWORKER_ADDR], "127.0.0.1:7001");
    sv(&w[R_SWORKER_NAME], "w\xffrker");
    sv(&c[R_SCLIENT_HOST], "h\xc3");
    proto_msg m = {.type = PROTO_STATUS, .nf = PROTO_NF_STATUS};
    sv(&m.f[F_STATUS_LISTEN], "127.0.0.1:\x80");
    recs(&m.f[F_STATUS_WORKERS], w, 1, PROTO_NF_REC_SWORKER);
    recs(&m.f[F_STATUS_CLIENTS], c, 1, PROTO_NF_REC_SCLIENT);
    json_t *doc = ctl_doc__build(&m, 1, NULL);
    assert_non_null(doc);
    assert_string_equal(member(json_object_get(doc, "scheduler"), "address"), "127.0.0.1:?");
    json_t *jw = json_array_get(json_object_get(doc, "workers"), 0);
    assert_string_equal(member(jw, "name"), "w?rker");
    assert_string_equal(member(jw, "address"), "127.0.0.1:7001");
    assert_string_equal(member(json_array_get(json_object_get(doc, "clients"), 0), "host"), "h?");
    /* /metrics, built from the document, names the worker too. */
    char *text = ctl_doc_metrics(doc);
    assert_non_null(text);
    assert_non_null(strstr(text, "worker=\"w?rker\""));
    free(text);
    json_decref(doc);
}

static void doc_jobs_keeps_host_and_call_site_that_are_not_utf8(void **state)
{
    (void)state;
    proto_val g[PROTO_NF_REC_GRAPH] = {0};
    sv(&g[R_GRAPH_HOST], "\xff\xfe");
    sv(&g[R_GRAPH_SITE], "main.c:\xe2\x82");
    proto_msg m = {.type = PROTO_GRAPHS, .nf = PROTO_NF_GRAPHS};
    recs(&m.f[F_GRAPHS_GRAPHS], g, 1, PROTO_NF_REC_GRAPH);
    json_t *doc = ctl_doc__build(&m, 1, NULL);
    assert_non_null(doc);
    json_t *jg = json_array_get(json_object_get(doc, "graphs"), 0);
    assert_string_equal(member(json_object_get(jg, "client"), "host"), "??");
    assert_string_equal(member(jg, "call_site"), "main.c:??");
    json_decref(doc);
}

static void doc_memory_keeps_strings_that_are_not_utf8(void **state)
{
    (void)state;
    proto_val o[PROTO_NF_REC_MOBJ] = {0}, hd[PROTO_NF_REC_HOLDER] = {0}, l[PROTO_NF_REC_MLOC] = {0};
    proto_val n[PROTO_NF_REC_MNODE] = {0};
    o[R_MOBJ_ID].id.lo = 1;
    o[R_MOBJ_SIZE].u = 100;
    sv(&o[R_MOBJ_SITE], "site\xff");
    sv(&o[R_MOBJ_OWNER_HOST], "own\xc3\x28");
    sv(&o[R_MOBJ_TASK_FN], "fn\x80");
    sv(&hd[R_HOLDER_WHO], "who\xff");
    recs(&o[R_MOBJ_HOLDERS], hd, 1, PROTO_NF_REC_HOLDER);
    l[R_MLOC_WORKER].u = 7;
    l[R_MLOC_WHERE].u = 1;
    recs(&o[R_MOBJ_LOCS], l, 1, PROTO_NF_REC_MLOC);
    n[R_MNODE_ID].u = 7;
    sv(&n[R_MNODE_ADDR], "127.0.0.1:7001");
    sv(&n[R_MNODE_NAME], "n\xf0\x9f");
    proto_msg m[2] = {{.type = PROTO_MEMORY_OBJS, .nf = PROTO_NF_MEMORY_OBJS},
                      {.type = PROTO_MEMORY_END, .nf = PROTO_NF_MEMORY_END}};
    recs(&m[0].f[F_MEMOBJS_OBJS], o, 1, PROTO_NF_REC_MOBJ);
    recs(&m[1].f[F_MEMEND_NODES], n, 1, PROTO_NF_REC_MNODE);
    m[1].f[F_MEMEND_COMPLETE].u = 1;

    static const struct {
        const char *group_by, *group;
    } groups[] = {{"node", "n??"}, {"owner", "own?( pid 0"}, {"call-site", "site?"}};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        json_t *doc = ctl_doc__build(m, 2, groups[i].group_by);
        assert_non_null(doc);
        json_t *jo = json_array_get(json_object_get(doc, "objects"), 0);
        assert_string_equal(member(jo, "call_site"), "site?");
        assert_string_equal(member(json_object_get(jo, "owner"), "host"), "own?(");
        assert_string_equal(member(jo, "task"), "fn?");
        assert_string_equal(member(json_array_get(json_object_get(jo, "holders"), 0), "who"),
                            "who?");
        assert_string_equal(member(json_array_get(json_object_get(jo, "locations"), 0), "node"),
                            "n??");
        assert_string_equal(member(json_array_get(json_object_get(doc, "nodes"), 0), "name"),
                            "n??");
        json_t *g = json_array_get(json_object_get(doc, "groups"), 0);
        assert_string_equal(member(g, "group"), groups[i].group);
        json_decref(doc);
    }
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(doc_str_scrubs_and_keeps_valid_text),
    cmocka_unit_test(doc_status_keeps_names_that_are_not_utf8),
    cmocka_unit_test(doc_jobs_keeps_host_and_call_site_that_are_not_utf8),
    cmocka_unit_test(doc_memory_keeps_strings_that_are_not_utf8),
};
SPW_TEST_MAIN(tests)
