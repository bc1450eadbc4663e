//! Protocol types for the agent mesh: A2A messages and parts, agent cards, the workflow
//! DataParts, subject names and header names. No I/O and no async runtime.
