//! Wire formats as a client sees them on the routes: the AG-UI events of a
//! streamed agent chat.

mod agui;
