;;; forj-mcp.el --- Review other agents' forj calls in Emacs  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

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

;; Another agent (Claude Code, Codex, gptel through mcp.el) can use
;; forj's tools through `python -m forj_py mcp'.  When Emacs runs the
;; project's worker, that MCP server sends its calls through it, and
;; when the user's own config sets `[mcp] review_in_emacs = true' a call
;; that needs review is put to this Emacs: the worker calls `review'
;; with the plan item exactly as it planned it, and the user answers in
;; an ordinary forj review buffer (approve, deny with a reason, edit
;; before approving, grant).  The review names the MCP client it comes
;; from, and no chat buffer is touched.
;;
;; A review left unanswered for the worker's time limit closes by
;; itself and is answered "unanswered": the MCP server then falls back
;; to its client's own way of asking, or refuses the call, saying why.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-epc)
(require 'forj-review)
(require 'forj-worker)
(require 'forj-notify)

(defvar-local forj-mcp--client nil
  "The MCP client a review buffer reviews a call of, for the header line.")

(defun forj-mcp-review (worker body answer)
  "Put the call in BODY, planned by WORKER for an MCP client, to the user.
BODY has :batch_id, :client (the client's name), :item (the plan item)
and :timeout_seconds.  ANSWER is called once with the decision plist:
:decision \"approve\" (with :modified and :grant when given),
\"deny\" (with :reason) or \"unanswered\".  Return non-nil: the call is
taken."
  (let* ((item (plist-get body :item))
         (client (let ((name (plist-get body :client)))
                   (if (and (stringp name) (not (string-empty-p name))) name "an MCP client")))
         (batch-id (plist-get body :batch_id))
         (id (plist-get item :id))
         (timeout (plist-get body :timeout_seconds))
         (buffer nil))
    (unless (and (stringp batch-id) (stringp id))
      (error "A review request without a batch or call id"))
    (setq buffer
          (save-window-excursion
            (forj-review-open
             (list (forj-mcp--item item client))
             (lambda (approved denied modified &optional cancelled grants)
               (funcall answer (forj-mcp--decision id approved denied modified cancelled grants)))
             (lambda (call ok fail)
               (forj-epc-call (forj-worker-connection worker) "proposal"
                              (list :batch_id batch-id :call_id call)
                              :success (lambda (reply) (funcall ok (append (plist-get reply :files) nil)))
                              :error fail)))))
    ;; Shown where a review goes, without the window changes of a chat's
    ;; review being undone for it: the user's windows are left as they are
    ;; once it is answered.
    (with-current-buffer buffer
      (setq forj-mcp--client client)
      (setq forj-review-windows nil)
      (setq header-line-format
            (format "forj review for the MCP client %s (not from a forj chat)"
                    (replace-regexp-in-string "%" "%%" client)))
      (rename-buffer (format "*forj-review: %s*" client) t))
    (display-buffer buffer forj-display-review)
    (when (and (numberp timeout) (> timeout 0))
      (run-at-time timeout nil #'forj-mcp--time-out buffer answer))
    (message "forj: %s asks to run %s; review it in %s" client
             (or (plist-get item :name) "a tool") (buffer-name buffer))
    (forj-notify 'review buffer (format "forj: %s asks to run %s" client
                                        (or (plist-get item :name) "a tool")))
    t))

(defun forj-mcp--item (item client)
  "Return ITEM as the review is to show it, its summary naming CLIENT."
  (let ((item (copy-sequence item)))
    ;; The answer to an MCP client approves a call whole (or as edited):
    ;; no hunk keys here.
    (setq item (cl-loop for (key value) on item by #'cddr
                        unless (eq key :hunk_files) append (list key value)))
    (plist-put item :summary
               (format "[MCP client %s] %s" client
                       (or (plist-get item :summary) (plist-get item :name) "")))))

(defun forj-mcp--decision (id approved denied modified cancelled grants)
  "The answer for call ID from a review's decisions.
APPROVED, DENIED, MODIFIED, CANCELLED and GRANTS are as the review's
callback gets them (see `forj-review-open')."
  (cond
   ((and (not cancelled) (member id approved))
    (let ((texts (make-hash-table :test #'equal))
          (grant (cdr (assoc id grants))))
      (dolist (pair (cdr (assoc id modified)))
        (puthash (car pair) (cdr pair) texts))
      (append (list :decision "approve" :modified texts)
              (and grant (list :grant grant)))))
   (t
    (let ((reason (cdr (assoc id denied))))
      (list :decision "deny"
            :reason (cond ((and (stringp reason) (not (string-empty-p reason))) reason)
                          (cancelled "the user cancelled the review")
                          (t "")))))))

(defun forj-mcp--time-out (buffer answer)
  "Close the review BUFFER if still open; tell the worker through ANSWER."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when forj-review-callback
        ;; Closing is not a denial: the MCP server falls back to its own way.
        (let ((client forj-mcp--client))
          (setq forj-review-callback nil)
          (kill-buffer buffer)
          (funcall answer (list :decision "unanswered"))
          (message "forj: the review for %s went unanswered; the call was handed back"
                   (or client "an MCP client")))))))

(provide 'forj-mcp)
;;; forj-mcp.el ends here
