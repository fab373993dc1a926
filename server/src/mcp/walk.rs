//! A bounded walk over a world's documents through LIST, for the tools that need more than
//! one directory (backlinks, the resource list): directories breadth first, each listed
//! page by page, stopping after a set number of documents.

use std::collections::VecDeque;

use crate::mark::{Request, Response, Status, Verb};
use crate::remote::{Remote, RemoteError};

/// The documents found, in walk order, and whether the walk saw everything.
#[derive(Debug, Default)]
pub struct Walked {
    pub documents: Vec<String>,
    pub complete: bool,
}

/// Why a walk stopped early.
#[derive(Debug)]
pub enum WalkError {
    /// The server refused a listing (its answer says why).
    Refused(Response),
    Failed(RemoteError),
}

/// Lists every document under `scope` (a directory), at most `max`.
pub async fn documents(
    remote: &Remote,
    token: Option<&str>,
    scope: &str,
    max: usize,
) -> Result<Walked, WalkError> {
    let mut walked = Walked::default();
    let mut queue = VecDeque::from([directory(scope)]);
    while let Some(dir) = queue.pop_front() {
        let mut cursor: Option<String> = None;
        loop {
            let mut request = Request::new(Verb::List, dir.clone());
            if let Some(token) = token {
                request.metadata.insert("auth".into(), token.to_owned());
            }
            if let Some(cursor) = &cursor {
                request.metadata.insert("cursor".into(), cursor.clone());
            }
            let response = remote.send(&request).await.map_err(WalkError::Failed)?;
            if response.status != Status::Ok {
                return Err(WalkError::Refused(response));
            }
            let body = String::from_utf8_lossy(&response.body).into_owned();
            for target in crate::links::targets(&body) {
                let Some(child) = crate::links::resolve(&dir, &target) else {
                    continue;
                };
                if child.ends_with('/') {
                    queue.push_back(child);
                } else {
                    if walked.documents.len() == max {
                        return Ok(walked);
                    }
                    walked.documents.push(child);
                }
            }
            match response.metadata.get("next-cursor") {
                Some(next) => cursor = Some(next.clone()),
                None => break,
            }
        }
    }
    walked.complete = true;
    Ok(walked)
}

/// A directory path as a base for relative links: ending in `/`.
fn directory(path: &str) -> String {
    if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    }
}
