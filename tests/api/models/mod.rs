mod retrieval;
mod routing;
