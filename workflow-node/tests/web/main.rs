//! The web view: its JSON API and event streams over plain HTTP, `serve --http` and `ui`
//! as processes, and a headless browser driving the page.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod browser;
mod cli;
mod hooks;
mod schedules_page;
mod signals;
