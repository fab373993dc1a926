//! Export: every document and every retained version of a world, with the stored version
//! bytes, read through the state's history blocks and recent records. A state replayed from
//! the whole log and one loaded from checkpoints export identically.

use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use quire_blob::BlobStore;
use quire_log::metadata::Catalog;
use quire_log::{DocPath, DocState, VersionRecord, WorldState};

use crate::error::{Error, Op, Result};
use crate::history::all_records;

/// How many documents export reads at once.
const EXPORT_READERS: usize = 16;

/// One retained version with its stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportedVersion {
    pub record: VersionRecord,
    pub bytes: Bytes,
}

/// One document with its retained versions, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportedDocument {
    pub path: DocPath,
    pub first: u64,
    pub current: u64,
    pub archived: bool,
    pub catalog: Catalog,
    pub versions: Vec<ExportedVersion>,
}

/// Exports one document.
pub async fn export_document(
    store: &dyn BlobStore,
    prefix: &str,
    doc: &DocState,
) -> Result<ExportedDocument> {
    let records = all_records(store, prefix, doc).await?;
    let mut versions = Vec::with_capacity(records.len());
    for record in records {
        let bytes = quire_log::version::read_version(store, prefix, &record)
            .await
            .map_err(|e| Error::from_log(Op::Read, e))?;
        versions.push(ExportedVersion { record, bytes });
    }
    Ok(ExportedDocument {
        path: doc.path.clone(),
        first: doc.first,
        current: doc.current,
        archived: doc.archived,
        catalog: doc.catalog.to_catalog(),
        versions,
    })
}

/// Exports every document of `state` in path order.
pub fn export(
    store: Arc<dyn BlobStore>,
    prefix: String,
    state: WorldState,
) -> impl Stream<Item = Result<ExportedDocument>> {
    let docs: Vec<Arc<DocState>> = state.docs().cloned().collect();
    futures::stream::iter(docs)
        .map(move |doc| {
            let store = store.clone();
            let prefix = prefix.clone();
            async move { export_document(&*store, &prefix, &doc).await }
        })
        .buffered(EXPORT_READERS)
}
