mod agui;
mod chat;
