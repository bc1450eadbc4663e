//! The pages: one HTML page, its script and style, and the vendored Mermaid
//! (`workflow-node/web/vendor/README.md` says which version and its licence), compiled
//! into the binary so that nothing is fetched at run time.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("../../web/index.html");
const APP: &str = include_str!("../../web/app.js");
const STYLE: &str = include_str!("../../web/style.css");
const MERMAID: &str = include_str!("../../web/vendor/mermaid-11.12.0.min.js");

/// The routes of the pages.
pub(super) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { page("text/html; charset=utf-8", INDEX) }),
        )
        .route("/app.js", get(|| async { page(JS, APP) }))
        .route("/style.css", get(|| async { page("text/css", STYLE) }))
        .route(
            "/vendor/mermaid.min.js",
            get(|| async { page(JS, MERMAID) }),
        )
}

const JS: &str = "text/javascript; charset=utf-8";

fn page(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}
