;;; forj.el --- Coding agent whose every edit you review as a diff  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; Author: The forj authors
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: tools, convenience

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; forj lets a language model read and change the current project
;; through tools, with every edit shown as a diff for the user to
;; approve.  A Python worker, one per project, validates, sandboxes,
;; journals and executes the tool calls; Emacs owns the conversation and
;; every decision.
;;
;; This file holds what the whole package shares: the customization
;; group and the version.  The connection to the worker is in
;; forj-epc.el, its lifecycle in forj-worker.el.

;;; Code:

(defgroup forj nil
  "A coding agent that lives inside Emacs."
  :group 'tools
  :prefix "forj-")

(defconst forj-version "0.1.0"
  "The version of forj.")

(defun forj-project-file (path root)
  "The file Emacs names for PATH, a path the worker gave, inside ROOT; else nil.
PATH is relative to ROOT or absolute, and names a file on the worker's
host: for a remote ROOT (a TRAMP directory) the result carries ROOT's
TRAMP prefix, so it is always the remote file and never the local file
of the same name.  A PATH that leads outside ROOT (\"/etc/passwd\",
\"../x\", a TRAMP name such as \"/sudo::/etc/shadow\") names nothing
Emacs may visit, revert or rename for the worker: nil.  A leading ~
is a directory of that name inside ROOT, never a home directory."
  (when (and (stringp path) (not (equal path "")) (stringp root))
    (let* ((host (file-remote-p root))
           (top (file-name-as-directory (if host (file-local-name root) root)))
           ;; Plain string arithmetic: no handler may read PATH as a
           ;; TRAMP name or reach a host to expand it.
           (file-name-handler-alist nil)
           (local (expand-file-name (if (string-prefix-p "/" path) path (concat "./" path))
                                    top)))
      (and (or (string-prefix-p top local) (equal local (directory-file-name top)))
           (concat host local)))))

(provide 'forj)
;;; forj.el ends here
