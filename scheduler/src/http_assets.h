/* The dashboard's files, embedded at build time (scheduler/embed.cmake). */
#ifndef SPW_HTTP_ASSETS_H
#define SPW_HTTP_ASSETS_H

#include <stddef.h>

extern const unsigned char http_asset_index_html[];
extern const size_t http_asset_index_html_len;
extern const unsigned char http_asset_dygraph_js[];
extern const size_t http_asset_dygraph_js_len;
extern const unsigned char http_asset_dygraph_css[];
extern const size_t http_asset_dygraph_css_len;

#endif
