//! Wire formats as a client sees them on the routes: the AG-UI events of a
//! streamed agent chat, and the AG-UI endpoint.

mod agui;
mod agui_endpoint;
